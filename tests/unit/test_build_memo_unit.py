"""The build memo's parts on plain objects (``inside/launch/build_memo.py``): what a key holds, which reads are seen,
and a kept model put back as the loader returned it. Its verdicts against fresh builds: tests/integration."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from bisect_spec.inside.launch.build_memo import _Kept, _ReadsWatched, _state


class Backend(enum.Enum):
    TRITON = "triton"
    FA3 = "fa3"


@dataclasses.dataclass
class Args:
    tp_size: int = 8
    speculative_num_steps: int | None = 3
    attention_backend: Backend = Backend.FA3
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


def test_a_key_holds_every_value_but_the_left_out_names() -> None:
    leave_out = frozenset({"speculative_num_steps"})
    base = _state(Args(), leave_out=leave_out)
    assert _state(Args(speculative_num_steps=7), leave_out=leave_out) == base
    assert _state(Args(tp_size=4), leave_out=leave_out) != base
    assert _state(Args(attention_backend=Backend.TRITON), leave_out=leave_out) != base
    assert _state(Args(extra={"speculative_num_steps": 1}), leave_out=leave_out) == \
        _state(Args(extra={"speculative_num_steps": 2}), leave_out=leave_out)  # a copy under a dict key too
    assert _state(Args(extra={"depth": [1, {"x": 2}]})) != _state(Args(extra={"depth": [1, {"x": 3}]}))
    looped = Args()
    looped.extra["self"] = looped
    assert _state(looped) == _state(looped)  # a cycle ends


def test_only_the_left_out_fields_reads_are_seen_and_the_class_comes_back() -> None:
    args = Args()
    watcher = _ReadsWatched([args], frozenset({"speculative_num_steps", "chunked_prefill_size"}))
    with watcher.watching() as watched:
        assert watched
        assert args.tp_size == 8 and args.speculative_num_steps == 3
        args.speculative_num_steps = 5  # a write goes through
        assert args.speculative_num_steps == 5
        assert isinstance(args, Args) and type(args) is not Args
    assert type(args) is Args
    assert watcher.read == {"speculative_num_steps": 3}
    assert args.speculative_num_steps == 5


class Module:
    """What :class:`_Kept` needs of a model: ``modules()``, each with its attributes in ``__dict__``."""

    def __init__(self, children: list[Module] | None = None) -> None:
        self._buffers: dict[str, Any] = {"cache": (1024,)}
        self.hooks: list[Any] = []
        self.children = children or []

    def modules(self) -> list[Module]:
        return [self, *(m for child in self.children for m in child.modules())]


def test_a_kept_model_comes_back_as_the_loader_returned_it_with_its_side_lists() -> None:
    rope = Module()
    model = Module([rope])
    skipped: list[str] = []
    kept = _Kept.of(model, {}, [["KimiK25ForConditionalGeneration.post_load_weights"]])
    rope._buffers["cache"] = (4096,)  # the runner grows the RoPE cache for the draft's steps
    rope.hooks.append("capture")
    model.layers_to_capture = [2, 30, 58]  # type: ignore[attr-defined]  # and sets EAGLE3's layers
    assert kept.put_back([skipped]) is model
    assert rope._buffers == {"cache": (1024,)} and rope.hooks == [] and not hasattr(model, "layers_to_capture")
    assert skipped == ["KimiK25ForConditionalGeneration.post_load_weights"]
