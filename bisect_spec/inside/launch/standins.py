"""Stand-ins for what a real launch has built by the time a stage runs (a loaded target, a built runner,
a bare shell of an object), and the markers that end a stage where the emulation stops it.
"""

from __future__ import annotations

from typing import Any

from .sglang_lookup import _view
from .stage import _NotLoaded


class _DraftRunnerReached(BaseException):
    """The draft worker builds its draft model worker: the draft's weights load next."""


class _Unloaded:
    """Something of the loaded target the draft worker is handed (a memory pool): any use of it ends the stage."""

    def __init__(self, what: str) -> None:
        object.__setattr__(self, "_what", what)

    def __getattr__(self, name: str) -> Any:
        raise _NotLoaded(f"reads {self._what}.{name} (only a loaded server has it)")

    def __setattr__(self, name: str, value: Any) -> None:
        raise _NotLoaded(f"writes {self._what}.{name} (only a loaded server has it)")

    def __bool__(self) -> bool:
        raise _NotLoaded(f"asks whether {self._what} is set (only a loaded server has it)")


class _LoadedTarget:
    """The scheduler's target ``TpModelWorker`` as the draft worker meets it: its model config and
    its runner (built up to the first device step) are real; anything else only a loaded server has."""

    def __init__(self, runner: Any, model_config: Any, args: Any) -> None:
        self.model_runner = _BuiltRunner(runner)
        self.model_config = model_config
        # the tokenizer it loaded (0.5.18+'s STANDALONE worker compares it with its draft's, which a draft model
        # worker does not load): any use of it ends the stage
        self.tokenizer = _Unloaded("the target worker's tokenizer")
        # TpModelWorker's seed: rank 0's own, which the broadcast hands every rank
        seed = getattr(_view(args), "random_seed", None)
        if seed is not None:
            self.random_seed = seed

    def get_memory_pool(self) -> tuple[Any, Any]:
        return _Unloaded("the target's request-to-token pool"), _Unloaded("the target's KV-cache allocator")

    def __getattr__(self, name: str) -> Any:
        raise _NotLoaded(f"reads the loaded target worker's {name}")


class _BuiltRunner:
    """The target runner as far as it was built; what its weights and memory pool would add ends the stage."""

    def __init__(self, runner: Any) -> None:
        object.__setattr__(self, "_runner", runner)

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._runner, name)
        except AttributeError:
            raise _NotLoaded(f"reads the loaded target runner's {name}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._runner, name, value)


class _CaptureReached(BaseException):
    """Ends the target runner's ``init_device_graphs`` once its graph runner chose the batch sizes it captures
    (the capture runs the model on the device)."""

    def __init__(self, sizes: dict[str, Any]) -> None:
        super().__init__("the CUDA-graph capture")
        self.sizes = sizes


class _OverTheGpu(BaseException):
    """Ends a model's construction on ``meta`` once its registered tensors exceed the GPU's whole memory (a
    ``BaseException``: SGLang's ``except Exception`` around a layer does not swallow it)."""

    def __init__(self, built: int) -> None:
        super().__init__("the weights outgrew the GPU")
        self.built = built


class _Shell:
    """Something a draft worker holds, with what the stage gives it; any other read ends the stage."""

    def __init__(self, what: str, **values: Any) -> None:
        object.__setattr__(self, "_what", what)
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        raise _NotLoaded(f"reads {self._what}.{name} (only a loaded server has it)")


class _DeviceReached(Exception):
    """Stops ``ModelRunner.__init__`` at its first device step (``init_torch_distributed``)."""
