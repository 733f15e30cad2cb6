"""Whose failure it is: SGLang's verdict on the flags (:func:`sglang_verdict`), or a fault of this
emulation (:func:`tool_fault`), which is never a verdict.
"""

from __future__ import annotations

import os
import re
import sys
import traceback

from .device_stops import (
    _chain,
    _device_step,
    _meta_value,
    _refusing_statement,
    _unregistered_here,
    _unwritten_context,
)
from .siblings import meta_device
from .stage import Progress, WillNotStart, _NotLoaded, declared


def _refused_in(exc: BaseException, filename: str) -> bool:
    """Whether ``exc`` is a refusal (:func:`_refusing_statement`) by a statement of SGLang's file ``filename``."""
    last = _refusing_statement(exc)
    return last is not None and os.path.abspath(last.filename) == os.path.abspath(filename)


_REFUSALS = (ValueError, AssertionError, NotImplementedError)


def sglang_verdict(exc: BaseException) -> bool:
    """True when ``exc``, raised while SGLang builds a model on ``meta`` (its layers, quantisation methods, the
    parallel layout's checks), is SGLang's own answer to the configuration, wherever the statement sits
    (``layers/dp_attention.py``'s ValueError for ``--attn-dp-size`` below ``--tp-size``, a quantisation's
    NotImplementedError, ``configs/model_config.py``'s ZeroDivisionError): decided from the raising statement
    and what it reads, not from the exception's type or file.

    It is SGLang's when the statement that raised it is SGLang's own (the innermost frame is in the ``sglang``
    package), and what it reads is the configuration: not a device call or a value only the GPU holds
    (:func:`_device_step`, :func:`_meta_value`), not a package this machine lacks (an import failed anywhere in
    its chain: a GPU package), not the registry missing a class whose module does not import here, not process
    state the device steps build (:func:`_unwritten_context`), and not an attribute of an object of bisect-spec's
    (a stand-in). A ``raise``/``assert`` that handles another exception (chained) is a refusal only where its
    cause is SGLang's verdict too."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or "/sglang/" not in frames[-1].filename.replace(os.sep, "/") \
            or os.path.abspath(frames[-1].filename).startswith(_OWN_PACKAGE):
        return False
    for link in _chain(exc):
        if isinstance(link, (ImportError, _NotLoaded, WillNotStart)):
            return False
        owner = getattr(link, "obj", None) if isinstance(link, AttributeError) else None
        if owner is not None and str(getattr(type(owner), "__module__", "")).startswith("bisect_spec"):
            return False
    if _device_step(exc) or _unregistered_here(exc) or _unwritten_context(exc):
        return False
    if _refusing_statement(exc) is not None:
        # SGLang's own unchained raise/assert ran to its end: what it read was no tensor value (reading one raises
        # in torch first), whatever its message says ("the meta-initialized client" of weight_cache/protocol.py
        # is not a meta tensor); a check of a tensor's placement on meta is the one exception
        try:
            return meta_device.names_a_meta_tensor(exc) is None
        except (Exception, _NotLoaded):
            return False
    if _meta_value(exc):
        return False
    cause = exc.__cause__ or exc.__context__
    return cause is None or sglang_verdict(cause)


def _refused_by_the_model(exc: BaseException, cls: type) -> bool:
    """True when ``exc`` was raised, unchained, by a ``raise`` or ``assert`` statement of the module of ``cls`` or of
    one of its bases in ``sglang.srt.models``: the model class refusing its config, as it would on a GPU box."""
    last = _refusing_statement(exc)
    if not isinstance(exc, _REFUSALS) or last is None:
        return False
    files = set()
    for klass in cls.__mro__:
        module = sys.modules.get(klass.__module__)
        path = getattr(module, "__file__", None) or ""
        if "/sglang/srt/models/" in path.replace(os.sep, "/"):
            files.add(os.path.abspath(path))
    return os.path.abspath(last.filename) in files


# -- faults of the emulation itself ------------------------------------------------------


#: bisect-spec's own package: a failure raised in it is never SGLang's verdict.
#: (``repro.py`` embeds this module's source without a ``__file__``: its own frames are then none of ours)
_OWN_PACKAGE = (os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(globals()["__file__"])))) + os.sep
                if "__file__" in globals() else "\0")
#: This package (``inside/launch``): a fault raised in any of its modules is the launch-path emulation's.
_LAUNCH_PACKAGE = (os.path.dirname(os.path.abspath(globals()["__file__"])) + os.sep
                   if "__file__" in globals() else "\0")


_UNPUBLISHED = re.compile(r"not published|publish\(\) (?:was )?not called|no (?:runtime )?context published", re.I)


#: What each of bisect-spec's inside modules stands in for, for the fault's one line.
_OWN_STEPS = {"simulated_gpu": "the simulated GPU box", "version_shims": "a version shim or stub",
              "launch_path": "the launch-path emulation", "evaluator": "the evaluator", "statements": "the evaluator",
              "launch_oracle": "the launch oracle", "worker_main": "the worker",
              "model_classes": "the model stand-ins"}


#: ``worker_main._no_network``'s refusal: evaluations run offline, and SGLang reaching for the hub is a
#: failure of the configuration (a hub id where a local path belongs), recorded as SGLang's, not a fault.
_OFFLINE = "bisect-spec blocked network access"


def tool_fault(exc: BaseException, progress: Progress) -> str | None:
    """The step of bisect-spec's own emulation that caused ``exc``; None when SGLang raised it.

    A fault of ours is: an exception whose raising frame is bisect-spec's code (a simulated
    GPU probe, a stub of a GPU package, a shim, a call this module makes with arguments the
    release does not take), or whose cause is (anywhere in its ``__cause__``/``__context__``
    chain); an attribute missing on an object of ours (a simulated device) or on one this
    module built by hand; SGLang's runtime context read as unpublished in a stage whose
    publication is this module's job. A real launch never meets any of these.
    """
    if any(str(link).startswith(_OFFLINE) for link in _chain(exc)):
        return None  # the documented offline refusal: SGLang's reach for the network, recorded as its failure
    for link in _chain(exc):
        frames = traceback.extract_tb(link.__traceback__)
        if frames and os.path.abspath(frames[-1].filename).startswith(_OWN_PACKAGE):
            module = os.path.splitext(os.path.basename(frames[-1].filename))[0]
            step = (_OWN_STEPS["launch_path"] if os.path.abspath(frames[-1].filename).startswith(_LAUNCH_PACKAGE)
                    else _OWN_STEPS.get(module, module))
            return f"{step} ({module}.py:{frames[-1].lineno} in {frames[-1].name})"
        owner = getattr(link, "obj", None) if isinstance(link, AttributeError) else None
        if owner is not None and id(owner) in progress.built:
            return f"stage {progress.stage}: {progress.built[id(owner)]}"
        if owner is not None and str(getattr(type(owner), "__module__", "")).startswith("bisect_spec"):
            return f"{_OWN_STEPS['simulated_gpu']}: {type(owner).__name__} has no attribute {getattr(link, 'name', '?')!r}"
        stage = declared(progress.stage)
        if stage is not None and stage.emulated and _UNPUBLISHED.search(str(link)):
            return f"runtime-context publication before stage {progress.stage}"
    return None
