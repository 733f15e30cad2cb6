"""bisect-spec: debug SGLang's speculative-decoding configuration space without a GPU."""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import BisectSpecError as BisectSpecError
from .flags import Config as Config
from .outcome import Outcome as Outcome
from .outcome import Status as Status
from .signature import Signature as Signature
