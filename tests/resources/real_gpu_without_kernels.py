"""Run inside a release environment's Python: a worker asked for the *real* GPU on a box that
has one but no ``sgl_kernel``. The "real" GPU is faked here by installing the simulated H200
before SGLang is imported (this machine has no GPU); everything after that is the evaluator's
own code path. Prints one JSON line: what the evaluator reported.

argv[1]: which hardware the worker is asked for: "real" or "simulated" (the h200 profile, as the
fidelity check's simulated side on that machine); argv[2]: model dir.
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
package = types.ModuleType("bisect_spec")
package.__path__ = [os.path.join(os.path.dirname(os.path.dirname(HERE)), "bisect_spec")]
sys.modules["bisect_spec"] = package

import torch  # noqa: E402

library = torch.library.Library("torchvision", "DEF")
library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
library.define("qnms(Tensor qdets, Tensor qscores, float iou_threshold) -> Tensor")

from bisect_spec.inside import evaluator, simulated_gpu  # noqa: E402

profile = json.loads(Path(package.__path__[0], "data", "hardware", "h200.json").read_text())
# The fake "real" GPU, visible before SGLang is imported. Without the simulated CUDA packages:
# this box is the one *without* sgl_kernel (the simulated box claims it is installed).
simulated_gpu.install({**profile, "simulate_packages": False}, 1)
try:
    worker = evaluator.Evaluator({"name": "real"} if sys.argv[1] == "real" else profile, 1)
except Exception as exc:
    print(json.dumps({"import_error": f"{type(exc).__name__}: {exc}"}))
    sys.exit(0)
model = sys.argv[2]
passing = worker.evaluate(["--model-path", model, "--trust-remote-code"])
info = worker.info()
print(json.dumps({"info": info, "cuda_available_after": torch.cuda.is_available(),
                  "status": passing["status"], "resolved": passing.get("resolved", {}),
                  "exception": passing.get("exception")}))
