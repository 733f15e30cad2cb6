"""The batch sizes the target's CUDA graphs would be captured for (``cuda_graph_sizes`` stage; mirrors
``cuda_graph_runner`` / ``base_cuda_graph_runner`` and ``graph_shared_output``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import sys
from typing import Any

from .device_stops import _run_to, _statement_calling, _stop_words, _tracing_allowed
from .faults import _refused_in, sglang_verdict
from .sglang_lookup import _attribute, _imported, _on_runner, _replaced
from .siblings import model_classes
from .stage import Progress, Stage, _NotLoaded
from .standins import _CaptureReached, _Shell, _Unloaded
from .target_worker import _request_pool_size


def _capture_sizes(runner: Any, runner_cls: Any, progress: Progress,
                   refusals: list[BaseException]) -> BaseException | None:
    """The batch sizes the target's CUDA-graph runner captures, chosen by SGLang's own code on the runner whose
    pool it sized (stage ``cuda_graph_sizes``; 0.4.6 … 0.5.13, where the runner sizes its pool itself).

    The runner's own ``init_device_graphs`` runs (SGLang decides whether graphs are captured: not with
    ``--disable-cuda-graph``); its graph runner's ``__init__`` runs from the start to the statement that calls
    ``get_batch_sizes_to_capture`` (:func:`model_classes.capture_sizes_statements`): the tokens per request a
    speculative target captures (``--speculative-num-draft-tokens``), then the sizes kept against the request
    pool and, with gathered buffers, the attention-TP width (``bs * num_tokens_per_bs % mul_base == 0``). Its
    ``assert len(capture_bs) > 0 and capture_bs[0] > 0, f"{capture_bs=}"`` is then SGLang's verdict (a public
    benchmark script records ``capture_bs=[]`` at tp 8 with EP, MTP's six tokens and ``--cuda-graph-max-bs 1``).
    The capture itself is never run; the attention backends' construction and the kernel warm-up before it on a
    real box are not run either (they size nothing this reads). The sizes are recorded (``cuda_graphs``). Any
    other failure on the way stops the stage, named. Returns the refusal (also in ``refusals``), or None."""
    module = sys.modules.get(runner_cls.__module__)
    graph_cls = vars(module).get("CudaGraphRunner") if module is not None else None
    statements = model_classes.capture_sizes_statements(graph_cls) if isinstance(graph_cls, type) else None
    init_graphs = getattr(runner_cls, "init_device_graphs", None)
    if graph_cls is None or statements is None or init_graphs is None or _request_pool_size(runner) is None:
        return None
    progress.enter(CUDA_GRAPH_SIZES.name)
    defaults = {name: parameter.default for name, parameter in inspect.signature(graph_cls.__init__).parameters.items()
                if parameter.default is not inspect.Parameter.empty}

    def sized(model_runner: Any, *_args: Any, **_kwargs: Any) -> None:
        graph_runner = _Shell("the CUDA-graph runner")
        names = {name: defaults.get(name) for name in statements.parameters}
        names[statements.parameters[0]] = model_runner
        model_classes.run(statements, self=graph_runner, **names)
        chosen = vars(graph_runner)
        raise _CaptureReached({"capture_bs": [int(b) for b in chosen.get("capture_bs") or []],
                               "num_tokens_per_bs": chosen.get("num_tokens_per_bs")})

    if "attn_backend" not in vars(runner):  # built after the pool on a real box; kept, not read, by the sizes
        runner.attn_backend = _Unloaded("the target's attention backend (built after the pool, not here)")
    steps = model_classes.steps_before_graphs(runner_cls)
    run_steps: set[str] = set()
    while True:
        try:
            with _replaced(module, "CudaGraphRunner", sized):
                init_graphs(runner)
        except _CaptureReached as reached:
            progress.cuda_graphs = reached.sizes
            return None
        except Exception as exc:
            if _refused_in(exc, statements.filename):
                refusals.append(exc)
                return exc
            step = _step_that_sets(exc, runner, runner_cls, steps - run_steps)
            if step is None:
                raise _NotLoaded(f"the CUDA-graph runner's batch sizes stopped at {_stop_words(exc)}") from None
        else:
            progress.cuda_graphs = {"disabled": True}  # SGLang's init_device_graphs built no graph runner
            return None
        run_steps.add(step)
        try:  # the runner's own step before the graphs, which sets what they read (0.5.12: use_ngram_embedding)
            getattr(runner_cls, step)(runner)
        except Exception as exc:
            raise _NotLoaded(f"the runner's {step}, before its CUDA graphs, stopped at {_stop_words(exc)}") from None


#: Where 0.5.14+ choose the batch sizes of the target's decode graphs, once its pools and backends are built:
#: ``(module, function)``, the runner's own method where ``module`` is None. Every release 0.5.14 … 0.5.23 has the
#: runner's ``init_decode_cuda_graph`` (0.5.16+: a wrapper of ``cuda_graph_setup.capture_decode_graph``, the second
#: entry, for a release that drops the wrapper). It decides first whether graphs are captured (the decode phase's
#: backend, a generation model, a PD-prefill speculative target), then calls ``get_batch_sizes_to_capture`` itself
#: (up to 0.5.21) or builds the graph runner whose ``__init__`` does (0.5.22+).
_DECODE_GRAPH_ENTRIES: tuple[tuple[str | None, str], ...] = (
    (None, "init_decode_cuda_graph"),
    ("sglang.srt.model_executor.model_runner_components.cuda_graph_setup", "capture_decode_graph"))


#: The module that defines ``get_batch_sizes_to_capture`` on 0.5.14+, the one that builds the decode graphs, and
#: the one whose shared logits buffer (0.5.15+) is sized for the graphs first.
_GRAPH_SIZES_MODULE = "sglang.srt.model_executor.runner.base_cuda_graph_runner"


_DECODE_GRAPH_MODULE = "sglang.srt.model_executor.runner.decode_cuda_graph_runner"


_SHARED_OUTPUT_MODULE = "sglang.srt.model_executor.graph_shared_output"


def _decode_graph_sizes(runner: Any, runner_cls: Any, progress: Progress,
                        refusals: list[BaseException]) -> BaseException | None:
    """The batch sizes of the target's decode graphs on 0.5.14+ (stage ``cuda_graph_sizes``), chosen by SGLang's
    own code on the runner whose pool it sized, as :func:`_capture_sizes` does up to 0.5.13.

    First, as ``init_cuda_graphs`` does before any graph (0.5.15+), SGLang's ``GraphSharedOutput
    .create_for_model_runner`` sizes the logits buffer every graph shares: for each draft-token width the decode
    graphs can verify (0.5.23: the adaptive widths too) it calls ``get_batch_sizes_to_capture`` on the runner;
    the rows it sizes are recorded (``shared_logits_rows``), and its class-wide buffer is put back afterwards.
    Then the release's entry (:data:`_DECODE_GRAPH_ENTRIES`) runs as written: it decides whether graphs are
    captured, and the tokens per request a speculative target verifies; SGLang's ``get_batch_sizes_to_capture``
    runs itself, keeping the sizes the request pool and the attention-TP alignment allow, and returns into a stop
    of ours (:class:`_CaptureReached`, put in place of the name in every module holding it), so the capture,
    which runs the model on the device, never starts. Its ``assert len(capture_bs) > 0 and capture_bs[0] > 0,
    f"{capture_bs=}"``, from either caller, is SGLang's verdict. The attention backends are not built here
    (their choice ran in ``attention_backend``): the runner holds a stand-in answering only the plain values
    ``AttentionBackend`` itself defines (:class:`_BackendDefaults`). Any other failure on the way stops the stage,
    named. Returns the refusal (also in ``refusals``), or None."""
    sizes_module = _imported(_GRAPH_SIZES_MODULE)
    original = vars(sizes_module).get("get_batch_sizes_to_capture") if sizes_module is not None else None
    entry: Any = None
    for module_name, name in _DECODE_GRAPH_ENTRIES:
        owner = runner_cls if module_name is None else _imported(module_name)
        entry = vars(owner).get(name) if owner is not None else None
        if entry is not None:
            break
    if original is None or entry is None or _request_pool_size(runner) is None:
        return None
    progress.enter(CUDA_GRAPH_SIZES.name)
    decode_graphs = _imported(_DECODE_GRAPH_MODULE)  # imported before the name is replaced in every module holding it
    graph_runner_cls = vars(decode_graphs).get("DecodeCudaGraphRunner") if decode_graphs is not None else None
    runner_init = getattr(vars(graph_runner_cls).get("__init__"), "__code__", None) \
        if isinstance(graph_runner_cls, type) else None
    runner_sizes_itself = runner_init is not None and \
        _statement_calling(runner_init, "get_batch_sizes_to_capture", 0) is not None
    shared_cls = _attribute((_SHARED_OUTPUT_MODULE,), "GraphSharedOutput")
    create = vars(shared_cls).get("create_for_model_runner") if isinstance(shared_cls, type) else None

    def sized(model_runner: Any, *args: Any, **kwargs: Any) -> Any:
        chosen = original(model_runner, *args, **kwargs)
        width = args[0] if args else kwargs.get("captured_req_width", kwargs.get("num_tokens_per_bs", 1))
        sizes = {"capture_bs": [int(b) for b in chosen[0]], "num_tokens_per_bs": width}
        caller = sys._getframe(1)
        device = _statement_calling(caller.f_code, "init_cuda_graph_state", caller.f_lineno)
        if device is None:
            if caller.f_code is not runner_init and runner_sizes_itself:
                # 0.5.14 ... 0.5.21: the entry chooses the sizes for its log line, then builds the graph runner,
                # which chooses them again itself: the stop is there
                return chosen
            raise _CaptureReached(sizes)  # nothing of the graph runner's follows: the sizes are the cut
        # the graph runner's own statements after its sizes run, up to its first device step (its attention
        # backend's graph buffers): 0.5.18+'s "Compact ragged verify does not support ..." among them
        progress.cuda_graphs = sizes
        _run_to(caller, device, _CaptureReached(sizes))
        return chosen

    shared_rows: int | None = None
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_tracing_allowed())
            if "attn_backend" not in vars(runner):
                stack.enter_context(_on_runner(runner, "attn_backend", _BackendDefaults()))
            if create is not None:  # SGLang's own sizing of the shared buffer, its process-wide one put back
                with _replaced(shared_cls, "_process_shared", None):
                    shared = shared_cls.create_for_model_runner(runner)
                rows = getattr(shared, "max_rows", None)
                shared_rows = rows if isinstance(rows, int) and not isinstance(rows, bool) else None
            holders = [m for name, m in list(sys.modules.items()) if name.startswith("sglang.") and m is not None
                       and vars(m).get("get_batch_sizes_to_capture") is original]  # also what the sizing imported
            for module in holders:
                stack.enter_context(_replaced(module, "get_batch_sizes_to_capture", sized))
            if module_name is None:
                entry(runner)
            else:
                entry(model_runner=runner)
    except _CaptureReached as reached:
        progress.cuda_graphs = reached.sizes
    except Exception as exc:
        if _refused_in(exc, inspect.getsourcefile(original) or "") or (progress.cuda_graphs and sglang_verdict(exc)):
            refusals.append(exc)
            return exc
        if progress.cuda_graphs:  # sized; what the graph runner does next stopped before its device step
            raise _NotLoaded(f"the decode graphs' runner, after its batch sizes, stopped at {_stop_words(exc)}") \
                from None
        raise _NotLoaded(f"the decode graphs' batch sizes stopped at {_stop_words(exc)}") from None
    else:
        progress.cuda_graphs = {"disabled": True}  # SGLang decided no decode graph is captured
    if shared_rows is not None and not progress.cuda_graphs.get("disabled"):  # rows for graphs never captured: none
        progress.cuda_graphs = {**progress.cuda_graphs, "shared_logits_rows": shared_rows}
    return None


class _BackendDefaults:
    """The target's attention backend as the decode graphs' sizing reads it, not built here: the plain values every
    backend inherits from SGLang's ``AttentionBackend`` (0.5.23's ``dllm_attention = None``); not its methods or
    properties (a property such as ``verify_mask`` answers per backend); anything else only a built backend has."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):  # copy, pickle, hasattr of protocols: not the backend's
            raise AttributeError(name)
        base = _attribute(("sglang.srt.layers.attention.base_attn_backend",), "AttentionBackend")
        inherited = vars(base) if isinstance(base, type) else {}
        if name not in inherited or callable(inherited[name]) or hasattr(inherited[name], "__get__"):
            raise _NotLoaded(f"reads the target's attention backend's {name} (built on the device, not here)")
        return inherited[name]


def _step_that_sets(exc: BaseException, runner: Any, runner_cls: Any, steps: set[str] | frozenset[str]) -> str | None:
    """The runner's own step before its CUDA graphs (:func:`model_classes.steps_before_graphs`, not yet run) that
    sets the runner attribute whose absence ``exc`` is, or None."""
    if not isinstance(exc, AttributeError) or getattr(exc, "obj", None) is not runner or not exc.name:
        return None
    owner = model_classes.assigning_method(runner_cls, exc.name)
    step = owner.rsplit(".", 1)[-1] if owner is not None else None
    return step if step in steps else None


CUDA_GRAPH_SIZES = Stage("cuda_graph_sizes",
                         "the batch sizes of the target's CUDA graphs, chosen against its request pool",
                         "CudaGraphRunner.__init__ up to capture (model_executor/cuda_graph_runner.py), on the sized pool",
                         run=lambda launch: _capture_sizes(launch.runner, type(launch.runner).__mro__[1], launch.progress,
                                                           launch.refusals))
#: The same stage where the pools are sized apart (0.5.14+): the decode graph runner's sizes.
DECODE_GRAPH_SIZES = dataclasses.replace(
    CUDA_GRAPH_SIZES, mirrors="the decode graph runner's batch sizes (model_executor/runner/decode_cuda_graph_runner.py, "
    "graph_shared_output.py), on the sized pool",
    run=lambda launch: _decode_graph_sizes(launch.runner, type(launch.runner).__mro__[1], launch.progress,
                                           launch.refusals))
