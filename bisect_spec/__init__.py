"""bisect-spec: debug SGLang's speculative-decoding configuration space without a GPU."""

from __future__ import annotations

__version__ = "0.1.0"

from bisect_spec.errors import BisectSpecError as BisectSpecError
from bisect_spec.model.flags import Config as Config
from bisect_spec.model.outcome import Outcome as Outcome
from bisect_spec.model.outcome import Status as Status
from bisect_spec.model.signature import Signature as Signature
