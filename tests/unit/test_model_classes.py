"""The model stand-ins and the running of SGLang's statements out of their function (bisect_spec/inside/model_classes.py).

A synthetic module written to a temporary directory plays SGLang's part here: what is checked is the mechanism
(Python's own AttributeError for a method the class lacks, raised in the statement's file and line; a method the
class has answering without running; what only tensors answer ending the stage). The real releases are checked
in tests/integration/test_after_weights.py.
"""

from __future__ import annotations

import ast
import importlib
import sys
import textwrap
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from bisect_spec.inside import model_classes

SOURCE = '''
class Base:
    def __init__(self):
        self.model = object()
        self.lm_head = object()

    def get_embed_and_head(self):
        raise RuntimeError("a method body must not run: it touches weights")

    def set_embed_and_head(self, embed, head):
        raise RuntimeError("a method body must not run")


class Target(Base):
    def set_eagle3_layers_to_capture(self, ids=None):
        raise RuntimeError("a method body must not run")


class Draft(Base):
    def __init__(self):
        super().__init__()
        self.hot_token_id = None


class Other:
    def get_embed_and_head(self):
        raise RuntimeError("a method body must not run")


EntryClass = [Target, Draft]


class Worker:
    def init_lm_head(self):
        import os.path as unused
        embed, head = self.target_worker.model.get_embed_and_head()
        shared = getattr(self.target_worker.model, "lm_head", None)
        if self.eagle3:
            self.draft.set_embed(embed)
        else:
            self.draft.set_embed_and_head(embed, head)
        self.after = True


class OtherWorker:
    def init_lm_head(self):
        if self.after:
            scale = 2
        embed, head = self.target_worker.model.get_embed_and_head()
        self.draft.set_embed_and_head(embed * scale, head)


class Runner:
    def initialize(self, min_per_gpu_memory):
        server_args = self.server_args
        self.memory_saver_adapter = "saver"
        self.expert_location = "not run: before the load"
        self.load_model()
        self.layers = self.model.layers
        if server_args.fits:
            self.init_memory_pool(min_per_gpu_memory)
        self.attention_backend = "not run: after the pool"

    def load_model(self):
        raise RuntimeError("a method body the test replaces")

class SlotsRunner:
    def initialize(self):
        server_args = self.server_args
        self.load_model()
        self.init_memory_pool()
        self.max_running_requests = min(server_args.max_running_requests // server_args.dp_size,
                                        self.req_to_token_pool.size)
        self.attention_backend = "not run: after the pool"

class TargetWorker:
    def __init__(self, server_args):
        self.model_runner = server_args.runner
        self.max_total_num_tokens = "not run: before the check"
        self.max_running_requests = self.model_runner.max_running_requests
        self.max_prefill_tokens = "not run: between"
        assert self.max_running_requests > 0, "max_running_request is zero"
        self.after = "not run: after the check"

class PoolWorker:
    def alloc_memory_pool(self, memory_pool_config=None):
        self.model_runner.alloc_memory_pool(memory_pool_config)
        # Validation
        assert self.model_runner.max_running_requests > 0, "max_running_request is zero"
        max_req_len = min(self.model_config.context_len - 1, self.model_runner.max_token_pool_size - 1)
        assert max_req_len > 0, "Memory pool size is too small"

class SchedulerSizedRunner:
    def initialize(self):
        self.init_memory_saver_adapter()
        self.sampler = "not run: before the load"
        self._token_oracle_manager = "set before the load"
        self.load_model()
        self.configure_kv_cache_dtype()

    def reload(self):
        self.load_model()
        self.reloaded = True

    def alloc_memory_pool(self):
        self.init_memory_pool(0)

class StepWorker:
    def init_lm_head(self):
        scale = 2
        for i in range(self.steps):
            embed, head = self.target_worker.model.get_embed_and_head()
            self.drafts[i].set_embed_and_head(embed * scale, head)
'''


@pytest.fixture
def fake_sglang(tmp_path: Path) -> Iterator[ModuleType]:
    (tmp_path / "fake_models.py").write_text(textwrap.dedent(SOURCE))
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("fake_models")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("fake_models", None)


class _Holder:
    def __init__(self, **values: object) -> None:
        self.__dict__.update(values)


def test_a_stand_in_has_the_class_name_methods_that_do_not_run_and_python_s_own_attribute_error(
        fake_sglang: ModuleType) -> None:
    draft = model_classes.stand_in(fake_sglang.Draft)
    assert type(draft).__name__ == "Draft"
    embed, head = draft.get_embed_and_head()  # answered, the body not run
    assert isinstance(embed, model_classes.Opaque) and isinstance(head, model_classes.Opaque)
    assert isinstance(draft.hot_token_id, model_classes.Opaque)  # assigned in __init__
    assert hasattr(draft, "model") and not hasattr(draft, "set_embed")
    with pytest.raises(AttributeError, match=r"^'Draft' object has no attribute 'set_embed'$"):
        draft.set_embed(embed)


def test_an_opaque_value_refuses_what_only_a_tensor_answers() -> None:
    value = model_classes.Opaque("the head")
    assert isinstance(value.data[0].clone(), model_classes.Opaque)
    with pytest.raises(model_classes.NotLoaded, match="the head"):
        bool(value)
    with pytest.raises(model_classes.NotLoaded):
        list(value)


def test_sglang_s_statements_run_out_of_their_function_and_fail_at_their_own_line(fake_sglang: ModuleType) -> None:
    statements = model_classes.lm_head_statements(fake_sglang.Worker)
    assert statements is not None and statements.function == "init_lm_head" and statements.owner == "Worker"
    source_lines = Path(str(fake_sglang.__file__)).read_text().splitlines()
    failing_line = next(i for i, line in enumerate(source_lines, 1) if "self.draft.set_embed(embed)" in line)
    worker = _Holder(target_worker=_Holder(model=model_classes.stand_in(fake_sglang.Target)),
                     draft=model_classes.stand_in(fake_sglang.Target), eagle3=True)
    with pytest.raises(AttributeError, match=r"^'Target' object has no attribute 'set_embed'$") as raised:
        model_classes.run(statements, self=worker)
    last = traceback.extract_tb(raised.value.__traceback__)[-1]
    assert (last.filename, last.lineno, last.name) == (fake_sglang.__file__, failing_line, "init_lm_head")
    assert last.line == "self.draft.set_embed(embed)"
    # the statements end with the last that shares the head: what comes after is not run
    assert not hasattr(worker, "after")


def test_the_other_branch_passes_with_the_method_the_class_has(fake_sglang: ModuleType) -> None:
    statements = model_classes.lm_head_statements(fake_sglang.Worker)
    assert statements is not None
    worker = _Holder(target_worker=_Holder(model=model_classes.stand_in(fake_sglang.Target)),
                     draft=model_classes.stand_in(fake_sglang.Draft), eagle3=False)
    model_classes.run(statements, self=worker)


def test_a_local_the_function_set_before_the_statements_stops_the_stage(fake_sglang: ModuleType) -> None:
    statements = model_classes.lm_head_statements(fake_sglang.OtherWorker)
    assert statements is not None
    worker = _Holder(target_worker=_Holder(model=model_classes.stand_in(fake_sglang.Target)),
                     draft=model_classes.stand_in(fake_sglang.Draft))
    with pytest.raises(model_classes.NotLoaded, match="reads scale, a local of init_lm_head"):
        model_classes.run(statements, self=worker)


def test_the_loop_around_the_statements_and_the_plain_locals_before_it_run_as_sglang_wrote_them(
        fake_sglang: ModuleType) -> None:
    # 0.5.21+'s multi-layer EAGLE worker: `target_runner = ...` before `for i in range(self.speculative_num_steps)`
    statements = model_classes.lm_head_statements(fake_sglang.StepWorker)
    assert statements is not None
    assert [type(node).__name__ for node in statements.nodes] == ["Assign", "For"]
    drafts = [model_classes.stand_in(fake_sglang.Draft), model_classes.stand_in(fake_sglang.Other)]
    worker = _Holder(target_worker=_Holder(model=model_classes.stand_in(fake_sglang.Target)), drafts=drafts, steps=2)
    with pytest.raises(AttributeError, match="'Other' object has no attribute 'set_embed_and_head'"):
        model_classes.run(statements, self=worker)
    worker = _Holder(target_worker=_Holder(model=model_classes.stand_in(fake_sglang.Target)), drafts=drafts, steps=1)
    model_classes.run(statements, self=worker)  # step 0's draft has it: the loop runs to its end


class _Runner:
    def __init__(self) -> None:
        self.server_args = None

    def init_memory_pool(self) -> None:
        self.token_to_kv_pool = None


class _LaterRunner(_Runner):
    def load(self) -> None:
        self.model = None


def test_the_method_that_sets_an_attribute_is_found_in_the_class_or_its_bases() -> None:
    assert model_classes.assigning_method(_LaterRunner, "model") == "_LaterRunner.load"
    assert model_classes.assigning_method(_LaterRunner, "token_to_kv_pool") == "_Runner.init_memory_pool"
    # __init__ ran (a runner built by hand ran it): a name only __init__ sets is not "set later"
    assert model_classes.assigning_method(_LaterRunner, "server_args") is None
    assert model_classes.assigning_method(_LaterRunner, "nowhere") is None


class _Config:
    def __init__(self, *, tie_word_embeddings: bool, draft_vocab_size: int | None, vocab_size: int) -> None:
        self.tie_word_embeddings = tie_word_embeddings
        self.draft_vocab_size = draft_vocab_size
        self.vocab_size = vocab_size


class _Eagle3Head:
    """As an EAGLE3 head's ``__init__`` decides whether it takes the target's head (llama_eagle3.py)."""

    def __init__(self, config: _Config, quant_config: object = None) -> None:
        self.config = config
        self.model = _build(config)
        self.load_lm_head_from_target = False
        if self.config.tie_word_embeddings:
            self.lm_head = self.model
        else:
            if config.draft_vocab_size is None:
                self.load_lm_head_from_target = True
                config.draft_vocab_size = config.vocab_size
            self.lm_head = _build(config)
        self.wide = config.draft_vocab_size > 1000  # type: ignore[operator]  # set just above when None
        self.hot_token_id: object = None
        if quant_config is not None:
            self.quantized = True

    def load_weights(self) -> None:
        self.hot_token_id = object()


def _build(config: _Config) -> object:
    return object()


def test_init_decides_from_the_config_alone_what_it_can() -> None:
    config = _Config(tie_word_embeddings=False, draft_vocab_size=None, vocab_size=32000)
    decided = model_classes.decided_by_init(_Eagle3Head, config)
    assert decided["load_lm_head_from_target"] is True
    assert decided["wide"] is True  # read after the __init__ wrote draft_vocab_size on its config
    assert config.draft_vocab_size is None  # on a copy: the caller's config is left as it was
    assert "model" not in decided and "lm_head" not in decided  # built by calls: never evaluated
    assert "hot_token_id" not in decided  # load_weights sets it too: only a loaded model knows it
    assert "quantized" not in decided  # under a test on a local the config does not hold
    with_vocab = model_classes.decided_by_init(_Eagle3Head, _Config(tie_word_embeddings=False, draft_vocab_size=500,
                                                                    vocab_size=32000))
    assert with_vocab["load_lm_head_from_target"] is False and with_vocab["wide"] is False
    built = model_classes.stand_in(_Eagle3Head, _Config(tie_word_embeddings=True, draft_vocab_size=None, vocab_size=8))
    assert built.load_lm_head_from_target is False
    with pytest.raises(model_classes.NotLoaded):
        bool(built.hot_token_id)


def test_the_load_and_the_pool_sizing_run_as_sglang_wrote_them_with_the_methods_parameter(
        fake_sglang: ModuleType) -> None:
    # 0.4.6 ... 0.5.13: initialize() loads, then sizes the pool; the stage runs the load through the sizing
    statements = model_classes.memory_pool_statements(fake_sglang.Runner)
    assert statements is not None
    assert statements.parameters == ("min_per_gpu_memory",)
    sized: list[float] = []
    runner: Any = _Holder(server_args=_Holder(fits=True), init_memory_pool=sized.append)
    runner.load_model = lambda: setattr(runner, "model", _Holder(layers=3))
    model_classes.run(statements, self=runner, min_per_gpu_memory=139.8)
    assert sized == [139.8]
    assert (runner.memory_saver_adapter, runner.layers) == ("saver", 3)
    assert not hasattr(runner, "expert_location") and not hasattr(runner, "attention_backend")


def test_the_runners_running_requests_after_the_sizing_and_the_workers_check_on_them(fake_sglang: ModuleType) -> None:
    # 0.4.6 ... 0.5.9: initialize() takes the running requests right after the sizing; every release's worker
    # asserts there is one, once the runner is built
    assert model_classes.running_requests_statements(fake_sglang.Runner) is None  # nothing follows the sizing
    taken = model_classes.running_requests_statements(fake_sglang.SlotsRunner)
    check = model_classes.requests_check_statements(fake_sglang.TargetWorker)
    assert taken is not None and check is not None
    runner: Any = _Holder(server_args=_Holder(max_running_requests=1, dp_size=8), req_to_token_pool=_Holder(size=1))
    model_classes.run(taken, self=runner)
    assert runner.max_running_requests == 0 and not hasattr(runner, "attention_backend")
    worker: Any = _Holder(model_runner=runner)
    with pytest.raises(AssertionError, match=r"^max_running_request is zero$"):
        model_classes.run(check, self=worker)
    assert not hasattr(worker, "max_prefill_tokens") and not hasattr(worker, "after")
    runner.max_running_requests = 1
    model_classes.run(check, self=worker)
    assert worker.max_running_requests == 1


def test_a_runner_whose_pool_is_sized_apart_loads_in_initialize_to_its_end(fake_sglang: ModuleType) -> None:
    # 0.5.14+: the scheduler sizes every worker's pool after the draft's weights load (alloc_memory_pool); what
    # initialize does after the load (the KV cache's dtype) is read by the sizing, and what it sets before it that
    # follows (memory saver, token oracle) is taken; another method that loads (a reload) is not the start-up
    runner = fake_sglang.SchedulerSizedRunner
    assert model_classes.pools_sized_apart(runner)
    assert not model_classes.pools_sized_apart(fake_sglang.Runner)
    statements = model_classes.memory_pool_statements(runner)
    assert statements is not None and statements.function == "initialize"
    assert [ast.unparse(n) for n in statements.nodes] == [
        "self.init_memory_saver_adapter()", "self._token_oracle_manager = 'set before the load'", "self.load_model()",
        "self.configure_kv_cache_dtype()"]


def test_where_the_worker_checks_in_alloc_memory_pool_its_checks_run_to_the_methods_end(fake_sglang: ModuleType) -> None:
    # 0.5.14+: TpModelWorker.alloc_memory_pool sizes through its runner, then checks; the allocation is not taken
    check = model_classes.requests_check_statements(fake_sglang.PoolWorker)
    assert check is not None and check.function == "alloc_memory_pool"
    runner: Any = _Holder(max_running_requests=0, max_token_pool_size=1)
    worker: Any = _Holder(model_runner=runner, model_config=_Holder(context_len=4096))
    with pytest.raises(AssertionError, match=r"^max_running_request is zero$"):
        model_classes.run(check, self=worker)
    runner.max_running_requests = 1
    with pytest.raises(AssertionError, match=r"^Memory pool size is too small$"):
        model_classes.run(check, self=worker)
    runner.max_token_pool_size = 2
    model_classes.run(check, self=worker)
