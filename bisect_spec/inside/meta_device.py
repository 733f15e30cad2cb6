"""GPU tensors as ``meta`` tensors, while the stages after the weights run: shapes and dtypes without storage.

A constructor SGLang runs after the weights load allocates small device buffers on the way to the checks
that matter (0.5.16+'s EAGLE v2 worker: ``self._topk1_parents_prealloc = torch.arange(..., device=self.device)``
before it builds the draft's runner). On this CPU build of torch such a call raises, and the stage used to
stop there: the draft runner's backend choice after it (sglang#23490) was never reached. Under
:func:`cuda_on_meta` a tensor placed on the GPU is made on PyTorch's ``meta`` device instead: its shape,
dtype and strides are real, its values are not. SGLang's code goes on to its next statement.

What is honest about it, and where it stops:

* **Placement only.** The mode rewrites the ``device`` a torch call names (``"cuda"``, ``"cuda:1"``,
  ``torch.device("cuda")``, a device index), ``.cuda()`` and ``.to(<a GPU device>)``; ``pin_memory`` is
  dropped (pinning needs a driver). Nothing else changes.
* **A value is never invented.** Reading a meta tensor's values (``.item()``, ``.tolist()``, a copy to the
  CPU, an ``if`` on a tensor, an op mixing it with a CPU tensor) raises in torch; :func:`reads_a_value` names
  such an exception, and the stage stops there, recorded as a step only a GPU answers, never a verdict.
* **A check on the placement itself is not SGLang's verdict.** A statement that fails while it names a meta
  tensor (``assert x.is_cuda``) is the tensor's placement speaking, not the configuration:
  :func:`names_a_meta_tensor` finds it from the failing frame, and the stage stops.

Hand-written on torch's own ``TorchFunctionMode`` (the supported hook for rewriting calls); no library does
this placement rewrite. ``torch.device("meta")`` as a default device would also move CPU tensors.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
import traceback
import types
from collections.abc import Iterator
from typing import Any

_META_MESSAGE = re.compile(r"\bmeta\b.*\b(tensor|device)s?\b|\b(tensor|device)s?\b.*\bmeta\b|no data", re.I)


def _is_gpu(device: Any) -> bool:
    if isinstance(device, bool):
        return False
    if isinstance(device, int):
        return True  # an index names a CUDA device
    if isinstance(device, str):
        return device.split(":", 1)[0] == "cuda"
    return getattr(device, "type", None) == "cuda"


@functools.cache
def _mode() -> Any:
    """The ``TorchFunctionMode`` class that rewrites GPU placement to ``meta`` (built once per process); None
    without torch."""
    try:
        import torch
        from torch.overrides import TorchFunctionMode
    except ImportError:  # pragma: no cover - every SGLang release needs torch
        return None

    to, cuda = torch.Tensor.to, torch.Tensor.cuda

    class _CudaOnMeta(TorchFunctionMode):  # type: ignore[misc]  # torch is not typed here
        # Every torch call of a build passes here (DeepSeek-V3 on meta: about 17,000 per evaluation): the common
        # case, no device named and no placement method, returns at once.
        def __torch_function__(self, func: Any, types_: Any, args: Any = (), kwargs: Any = None) -> Any:
            if kwargs and (kwargs.get("device") is not None or kwargs.get("pin_memory")):
                kwargs = dict(kwargs)
                if _is_gpu(kwargs.get("device")):
                    kwargs["device"] = "meta"
                if kwargs.get("pin_memory"):
                    kwargs["pin_memory"] = False
            if func is cuda and args and isinstance(args[0], torch.Tensor):
                return args[0].to("meta")
            if func is to and len(args) > 1 and _is_gpu(args[1]):
                args = (args[0], "meta", *args[2:])
            return func(*args, **(kwargs or {}))

    return _CudaOnMeta


@contextlib.contextmanager
def cuda_on_meta() -> Iterator[None]:
    """Within the block, tensors placed on a GPU are made on ``meta`` (see the module's notes)."""
    mode = _mode()
    if mode is None:
        yield
        return
    with mode():
        yield


def tensors_as_they_are() -> contextlib.AbstractContextManager[Any]:
    """Within the block, torch answers without any ``TorchFunctionMode`` (this module's, the loader's ``torch.device``):
    for the tool's own reads of tensors' shapes, dtypes and sizes while SGLang builds a model on ``meta``. Each read
    through the two modes runs two Python calls (a walk over Kimi-K2.6's tensors took 35x as long). Nothing read here
    depends on a mode: they rewrite placement of tensors being made, never what a made tensor says of itself."""
    torch = sys.modules.get("torch")
    if torch is None:
        return contextlib.nullcontext()
    return torch._C.DisableTorchFunction()  # type: ignore[no-any-return]


def reads_a_value(exc: BaseException) -> bool:
    """True when torch refused to read or combine a meta tensor's values (what only a GPU would hold)."""
    return isinstance(exc, (RuntimeError, NotImplementedError, TypeError, ValueError)) and bool(
        _META_MESSAGE.search(str(exc)))


def names_a_meta_tensor(exc: BaseException) -> str | None:
    """The name of a meta tensor the failing statement uses (a local, or ``self.<name>``), or None.

    Only ``torch.Tensor`` instances are asked for their device: a local may be a stand-in whose every
    attribute read ends the stage (a ``BaseException``), and nothing here may raise one."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    tb = exc.__traceback__
    last: types.FrameType | None = None
    while tb is not None:
        last = tb.tb_frame
        tb = tb.tb_next
    if last is None:
        return None
    line = traceback.extract_stack(last, limit=1)[-1].line or ""
    namespace = dict(last.f_locals)
    try:  # the instance's own attributes only: no property of SGLang's runs here
        attributes = dict(vars(namespace.get("self")))
    except TypeError:
        attributes = {}
    for name in re.findall(r"(?:self\.)?[A-Za-z_][A-Za-z0-9_]*", line):
        value = attributes.get(name[5:]) if name.startswith("self.") else namespace.get(name)
        if isinstance(value, torch.Tensor) and value.device.type == "meta":
            return str(name)
    return None
