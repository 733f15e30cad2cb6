"""Quantisation methods' post-load processing on ``meta`` (SGLang's ``process_weights_after_loading``, the loader's
last step): SGLang's JIT kernels called on ``meta`` tensors, and what one layer's processing did, set on the layers
like it without running it again. Helpers of the model build (:mod:`.model_build`); no stage here."""

from __future__ import annotations

import contextlib
import re
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from .sglang_lookup import _replaced

#: The attributes of a layer or quantisation method that decide what its post-load processing does, besides its
#: tensors' shapes and dtypes: plain values only (numbers, strings, booleans, None; tuples of them)
_PLAIN = (int, float, str, bool, type(None))


#: A layer's attributes that say which layer it is (its position and name), not what its processing does
_NAMES_THE_LAYER = re.compile(r"(^|_)(layer_id|layer_idx|layer_name|prefix)$")


def _plain(value: Any) -> bool:
    return isinstance(value, _PLAIN) or (isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value))


def _plain_dict(value: Any) -> bool:
    """A dict of plain keys and values (the processing's ``_original_shapes``): copied, not replayed by identity."""
    return isinstance(value, dict) and all(_plain(k) and _plain(v) for k, v in value.items())


def processing_key(method: Any, layer: Any) -> Any:
    """What a quantisation method's post-load processing of ``layer`` on ``meta`` depends on: the method's class and
    plain settings, the layer's class and plain attributes, and its own tensors' names, shapes and dtypes. Two
    layers with one key come out of the processing alike (Kimi-K2.6's 60 MoE layers: SGLang's Marlin repack loops
    over every expert of each); None where the layer holds a tensor that is not on ``meta``."""
    tensors = layer_tensors(layer)
    if tensors is None:
        return None
    settings = tuple(sorted((k, v) for k, v in vars(method).items() if _plain(v)))
    own = tuple(sorted((k, v) for k, v in vars(layer).items()
                       if _plain(v) and not k.startswith("_") and not _NAMES_THE_LAYER.search(k)))
    return (type(method), settings, type(layer), own, tuple(sorted(tensors.items())))


def objects_of(layer: Any, method: Any) -> dict[tuple[int, str], int]:
    """The layer's and the method's attributes that are neither plain values nor tensor stores, by identity: a
    processing that sets one (a kernel workspace, a runner) is not replayed, it runs for every layer."""
    found = {}
    for number, owner in enumerate((layer, method)):
        for name, value in vars(owner).items():
            if name not in ("_parameters", "_buffers", "_modules") and not _plain(value) and not _meta_tensor(value) \
                    and not _plain_dict(value):
                found[(number, name)] = id(value)
    return found


def _meta_tensor(value: Any) -> bool:
    """A tensor on ``meta`` kept as a plain attribute (a kernel's workspace): its shape and dtype are all it has."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter) \
        and value.is_meta


def layer_tensors(layer: Any) -> dict[str, tuple[Any, ...]] | None:
    """``layer``'s own parameters and buffers (not its children's): name -> (kind, shape, dtype, requires_grad);
    None where one is not on ``meta``."""
    found: dict[str, tuple[Any, ...]] = {}
    for kind, store in (("parameter", vars(layer).get("_parameters") or {}), ("buffer", vars(layer).get("_buffers") or {})):
        for name, tensor in store.items():
            if tensor is None:
                continue
            if not getattr(tensor, "is_meta", False):
                return None
            found[name] = (kind, tuple(tensor.shape), tensor.dtype, bool(getattr(tensor, "requires_grad", False)))
    return found


def effect_of(before: dict[str, tuple[Any, ...]], layer: Any) -> dict[str, Any] | None:
    """What a processing did to ``layer``'s own tensors (each one's kind, shape, dtype after it; those it removed)
    and plain attributes; None where it did more than that (a new attribute of another kind: not replayed)."""
    after = layer_tensors(layer)
    if after is None:
        return None
    attributes: dict[str, Any] = {}
    tensors: dict[str, tuple[Any, ...]] = {}
    for name, value in vars(layer).items():
        if name in ("_parameters", "_buffers", "_modules") or name.startswith("_forward") or name.startswith("_backward"):
            continue
        if _plain(value):
            attributes[name] = value
        elif _plain_dict(value):
            attributes[name] = dict(value)
        elif _meta_tensor(value):
            tensors[name] = (tuple(value.shape), value.dtype)
    return {"tensors": after, "removed": sorted(set(before) - set(after)), "attributes": attributes,
            "tensor_attributes": tensors}


def replay(effect: dict[str, Any], layer: Any) -> None:
    """Give ``layer`` the tensors and plain attributes :func:`_effect` recorded of a layer like it."""
    import torch

    for name in effect["removed"]:
        (vars(layer).get("_parameters") or {}).pop(name, None)
        (vars(layer).get("_buffers") or {}).pop(name, None)
    for name, (kind, shape, dtype, grad) in effect["tensors"].items():
        tensor = torch.empty(shape, dtype=dtype, device="meta")
        if kind == "parameter":
            layer._parameters[name] = torch.nn.Parameter(tensor, requires_grad=grad)
        else:
            layer._buffers[name] = tensor
    for name, value in effect["attributes"].items():
        setattr(layer, name, dict(value) if isinstance(value, dict) else value)
    for name, (shape, dtype) in effect["tensor_attributes"].items():
        setattr(layer, name, torch.empty(shape, dtype=dtype, device="meta"))


class _MetaKernels:
    """What SGLang's JIT kernel loader (``sglang.kernels.jit.utils.load_jit``, 0.5.2x) gives a post-load processing
    on ``meta``: each kernel, called with ``meta`` tensors only, writes nothing (it fills outputs SGLang's own Python
    allocated, with their shapes and dtypes; on ``meta`` there are no values to write, as with the fake
    implementations sgl-kernel registers for ``torch.compile``). The kernel's own device-side checks do not run.
    Called with any other tensor, it is a device step."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, kernel: str) -> Callable[..., None]:
        def on_meta(*args: Any, **kwargs: Any) -> None:
            tensors = [a for a in (*args, *kwargs.values()) if hasattr(a, "is_meta")]
            if not tensors or not all(t.is_meta for t in tensors):
                raise RuntimeError(f"SGLang's JIT kernel {self.name}.{kernel} needs a CUDA device")
            return None

        return on_meta


@contextlib.contextmanager
def jit_kernels_on_meta() -> Iterator[None]:
    """SGLang's JIT kernel modules load as :class:`_MetaKernels` while it lasts; afterwards no module keeps one
    (``cache_once`` holds what a loader returned: those entries are dropped, so no later step of this evaluation or
    of another sees a kernel that was not built)."""
    modules = [m for name, m in list(sys.modules.items())
               if (name == "sglang.kernels" or name.startswith("sglang.kernels.")) and callable(vars(m).get("load_jit"))]

    made: list[_MetaKernels] = []

    def load_on_meta(*args: Any, **_kwargs: Any) -> _MetaKernels:
        made.append(_MetaKernels(str(args[0]) if args else "?"))
        return made[-1]

    with contextlib.ExitStack() as stack:
        for module in modules:
            stack.enter_context(_replaced(module, "load_jit", load_on_meta))
        try:
            yield
        finally:
            if made:  # none handed out: no cache can hold one (each window drops its own)
                _forget_meta_kernels()


def _forget_meta_kernels() -> None:
    """Drop every :class:`_MetaKernels` a ``cache_once`` wrapper of ``sglang.kernels`` holds."""
    for name, module in list(sys.modules.items()):
        if not (name == "sglang.kernels" or name.startswith("sglang.kernels.")):
            continue
        for value in list(vars(module).values()):  # functions only: a lazy proxy answers any attribute
            for cell in (value.__closure__ or ()) if isinstance(value, types.FunctionType) else ():
                try:
                    held = cell.cell_contents
                except ValueError:
                    continue
                if isinstance(held, dict):
                    for key in [k for k, v in held.items() if isinstance(v, _MetaKernels)]:
                        del held[key]
