"""The deployment shape and the nearest layout that fits, on outcomes given as SGLang's sizing would give them
(pure functions over a batch predicate: no worker; the real sizing is tests/integration/test_will_not_start.py)."""

from __future__ import annotations

from collections.abc import Sequence

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome, Status
from bisect_spec.reduce.repair import fitting_layout, fixed_then_fitted
from bisect_spec.search.shape import deployment_shape, widths

GIB = 1 << 30


def _outcome(config: Config, needs_gpus: int, gpus: int, *, stopped: bool = False) -> Outcome:
    """What a model that needs ``needs_gpus`` GPUs' memory gives at ``config``'s width on a box of ``gpus``."""
    value = config.get("--tp-size") or config.get("--tensor-parallel-size") or ("1",)
    width = int(value[0]) * int((config.get("--pp-size") or ("1",))[0])
    if width > gpus:
        record = {"status": "failed", "will_not_start": {"cause": "gpus", "needed": width, "available": gpus}}
        return Outcome(config, Status.FAILED, "0.5.23", "3.11", "sim", record)
    if width < needs_gpus:
        record = {"status": "failed", "exception": {"type": "OutOfMemoryError", "message": "the weights ..."},
                  "will_not_start": {"cause": "weights", "needed": 100 * GIB * needs_gpus / width, "available": 95 * GIB}}
        return Outcome(config, Status.FAILED, "0.5.23", "3.11", "sim", record)
    record = {"status": "passed", "resolved": {"speculative_algorithm": config.get("--speculative-algorithm")},
              **({"needs_gpu": {"memory_pool": "a GPU step"}} if stopped else {})}
    return Outcome(config, Status.PASSED, "0.5.23", "3.11", "sim", record)


def _predicate(needs_gpus: int, gpus: int, calls: list[int]) -> object:
    def evaluate(batch: Sequence[Config]) -> list[Outcome]:
        calls.append(len(batch))
        return [_outcome(config, needs_gpus, gpus) for config in batch]
    return evaluate


def test_widths_are_the_gpu_count_then_powers_of_two_below_it() -> None:
    assert widths(8) == [8, 4, 2, 1]
    assert widths(6) == [6, 4, 2, 1]
    assert widths(1) == [1]


def test_a_model_that_needs_every_gpu_gets_them_and_says_why() -> None:
    calls: list[int] = []
    shape = deployment_shape(_predicate(8, 8, calls), gpus=8, given=Config(), model="kimi-k2.6", gpu="RTX PRO 6000")  # type: ignore[arg-type]
    assert shape.base == Config.of({"--tp-size": "8"})
    assert shape.line == "base: --tp-size 8 (kimi-k2.6 needs 8 RTX PRO 6000 for its weights)"
    assert [value for value, _ in shape.will_not_start] == ["1", "2", "4"]
    assert calls == [4]  # one batch


def test_a_small_model_is_launched_at_the_boxs_width() -> None:
    shape = deployment_shape(_predicate(1, 4, []), gpus=4, given=Config(), model="qwen3-32b", gpu="H100")  # type: ignore[arg-type]
    assert shape.base == Config.of({"--tp-size": "4"}) and shape.will_not_start == ()
    assert shape.reason == "--tp-size 4 (the box's 4 H100)"


def test_the_users_own_width_is_kept_and_nothing_is_evaluated() -> None:
    calls: list[int] = []
    shape = deployment_shape(_predicate(8, 8, calls), gpus=8, given=Config.of({"--tp-size": "2"}), model="m", gpu="H100")  # type: ignore[arg-type]
    assert shape.base == Config() and calls == []
    assert shape.reason == "your flags (--tp-size 2)"


def test_a_model_no_width_holds_is_said_so() -> None:
    shape = deployment_shape(_predicate(16, 8, []), gpus=8, given=Config(), model="deepseek-v3", gpu="H100")  # type: ignore[arg-type]
    assert shape.base == Config.of({"--tp-size": "8"}) and "does not start on 8 H100 at any width" in shape.reason


def test_the_release_spelling_of_tp_is_used() -> None:
    shape = deployment_shape(_predicate(8, 8, []), gpus=8, given=Config(), model="m", gpu="H200",  # type: ignore[arg-type]
                             tp="--tensor-parallel-size")
    assert shape.base == Config.of({"--tensor-parallel-size": "8"})


def test_out_of_memory_is_fixed_by_the_smallest_width_that_fits_the_box() -> None:
    fix = fitting_layout(Config.of({"--speculative-algorithm": "EAGLE3"}), _predicate(4, 8, []), gpus=8,  # type: ignore[arg-type]
                         cause="weights")
    assert fix is not None and fix["edits"] == ["set --tp-size 4"] and fix["verified"] is True
    assert fix["argv"] == ["--speculative-algorithm", "EAGLE3", "--tp-size", "4"]


def test_too_many_gpus_is_fixed_by_the_widest_layout_the_box_runs_never_a_wider_one() -> None:
    fix = fitting_layout(Config.of({"--tp-size": "16"}), _predicate(1, 4, []), gpus=4, cause="gpus")  # type: ignore[arg-type]
    assert fix is not None and fix["edits"] == ["set --tp-size 4"]
    assert fitting_layout(Config.of({"--tp-size": "2"}), _predicate(16, 8, []), gpus=8, cause="weights") is None  # type: ignore[arg-type]


def test_a_full_pass_ranks_before_a_pass_that_stopped_early() -> None:
    def evaluate(batch: Sequence[Config]) -> list[Outcome]:  # 4 GPUs fit but stop early; 8 pass whole
        return [_outcome(c, 4, 8, stopped=int((c.get("--tp-size") or ("1",))[0]) * int((c.get("--pp-size") or ("1",))[0]) == 4)
                for c in batch]

    fix = fitting_layout(Config(), evaluate, gpus=8, cause="weights")
    assert fix is not None and fix["edits"] == ["set --tp-size 8"] and fix["full_pass"] is True


def _refused_without_steps(needs_gpus: int, gpus: int, calls: list[int]) -> object:
    """SGLang refuses EAGLE3 without ``--speculative-num-steps`` (0.5.23's assert), before any sizing."""
    def evaluate(batch: Sequence[Config]) -> list[Outcome]:
        calls.append(len(batch))
        return [Outcome(c, Status.FAILED, "0.5.23", "3.11", "sim", {"status": "failed", "stage": "resolve"})
                if c.get("--speculative-num-steps") is None else _outcome(c, needs_gpus, gpus) for c in batch]
    return evaluate


def test_an_edit_sglang_accepts_that_will_not_start_as_typed_is_fitted_to_the_box() -> None:
    typed = Config.of({"--speculative-algorithm": "EAGLE3", "--speculative-num-draft-tokens": "3"})
    calls: list[int] = []
    evaluate = _refused_without_steps(8, 8, calls)
    near = [typed.with_("--speculative-num-steps", ("2",)), typed.without("--speculative-num-draft-tokens"),
            typed.with_("--speculative-num-steps", ("2",)).with_("--speculative-eagle-topk", ("1",))]
    tried = {o.config: o for o in evaluate(near)}  # type: ignore[operator]
    fix = fixed_then_fitted(typed, tried, evaluate, gpus=8)  # type: ignore[arg-type]
    assert fix is not None and fix["verified"] and fix["full_pass"]
    # the fewest edits that keep every typed value, then the width that fits: the draft tokens stay the user's
    assert fix["edits"] == ["add --speculative-num-steps 2", "add --tp-size 8"]
    assert Config.from_argv(fix["argv"]).get("--speculative-num-draft-tokens") == ("3",)


def test_nothing_is_offered_when_no_accepted_edit_fits_any_width_of_the_box() -> None:
    typed = Config.of({"--speculative-algorithm": "EAGLE3"})
    evaluate = _refused_without_steps(16, 8, [])
    tried = {o.config: o for o in evaluate([typed.with_("--speculative-num-steps", ("2",))])}  # type: ignore[operator]
    assert fixed_then_fitted(typed, tried, evaluate, gpus=8) is None  # type: ignore[arg-type]
    refused_only = {o.config: o for o in evaluate([typed])}  # type: ignore[operator]
    assert fixed_then_fitted(typed, refused_only, evaluate, gpus=8) is None  # type: ignore[arg-type]
