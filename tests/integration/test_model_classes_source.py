"""The class read from source (``model_classes.source_class``) against the class SGLang's own import gives.

On 0.5.11 and older a model's module does not import here (``vllm``, ``sgl_kernel``), so the model-class stages
read the class from its source. Where the module does import (0.5.12+), the imported class is the oracle: for
every architecture of the release that both can say, the stand-ins must agree on every name the speculative
path asks for. Run in the release's own Python (``bisect-spec env run`` does the same).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import bisect_spec
from tests.conftest import require_release

SCRIPT = """
import json, logging, sys
logging.disable(logging.CRITICAL)
sys.path.insert(0, sys.argv[1])
from bisect_spec.inside import model_classes as mc
NAMES = ["get_embed_and_head", "set_embed_and_head", "set_embed", "set_eagle3_layers_to_capture",
         "set_dflash_layers_to_capture", "load_lm_head_from_target", "hot_token_id", "lm_head", "model"]
def has(model, name):
    try:
        return hasattr(model, name)
    except mc.NotLoaded:  # a class with its own __getattr__: answered on a built model only
        return "?"
agree, disagree = [], []
for arch, modules in sorted(mc._defining_modules().items()):
    try:
        real = mc.model_class([arch])
    except BaseException:
        continue
    source = next((c for m in modules for c in [mc.source_class(m, arch)] if c is not None), None)
    if real is None or source is None or mc.FROM_SOURCE in vars(real):
        continue
    a, b = mc.stand_in(real), mc.stand_in(source)
    differ = [n for n in NAMES if has(a, n) != has(b, n)]
    (disagree if differ else agree).append([arch, differ])
print(json.dumps({"agree": agree, "disagree": disagree}))
"""


@pytest.mark.parametrize("release", ["0.5.12", "0.5.23"])
def test_the_class_read_from_source_agrees_with_the_imported_class(release: str, tmp_path: Path) -> None:
    require_release(release)
    script = tmp_path / "compare.py"
    script.write_text(SCRIPT)
    root = str(Path(bisect_spec.__file__).resolve().parents[1])
    run = subprocess.run([sys.executable, "-m", "bisect_spec", "env", "run", release, "--", "python", str(script), root],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["disagree"] == []
    agreed = {arch for arch, _ in result["agree"]}
    assert len(agreed) >= 150  # measured: 200 on 0.5.12, 272 on 0.5.23
    assert {"DeepseekV3ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLMEagle3", "KimiK25ForConditionalGeneration"} <= agreed
