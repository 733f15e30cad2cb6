"""GPU tensors made on ``meta`` while the stages after the weights run (bisect_spec/inside/meta_device.py).

torch lives in the release environments, not in the tool's own: each check runs in 0.5.23's interpreter.
What is checked is the mechanism: placement rewritten and nothing else, a value never invented (reading one
raises, and is recognised as such), a check on a meta tensor's placement named. The stages themselves are
checked on real releases in tests/integration/test_after_weights.py.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from bisect_spec.runtime import environments
from tests.conftest import require_release

pytestmark = pytest.mark.sglang

SCRIPT = textwrap.dedent('''
    import json, sys, torch
    sys.path.insert(0, {root!r})
    from bisect_spec.inside import meta_device

    found = {{}}
    with meta_device.cuda_on_meta():
        found["arange"] = str(torch.arange(8, device="cuda").device)
        found["index"] = str(torch.zeros(2, 3, device=0).device)
        found["device_object"] = str(torch.empty(4, device=torch.device("cuda", 1)).device)
        found["to"] = str(torch.ones(3).to("cuda:0").device)
        found["cuda_method"] = str(torch.ones(3).cuda().device)
        found["cpu_stays"] = str(torch.ones(3).device)
        found["shape"] = list(torch.zeros(5, 7, device="cuda", dtype=torch.bfloat16)[1:].shape)
        found["pinned"] = str(torch.empty(2, pin_memory=True).device)
        try:
            torch.arange(4, device="cuda").sum().item()
        except Exception as exc:
            found["item_refused"] = meta_device.reads_a_value(exc)

        class Worker:
            def __init__(self):
                self.buffer = torch.zeros(4, device="cuda")
                assert self.buffer.is_cuda, "the buffer must live on the GPU"

        try:
            Worker()
        except AssertionError as exc:
            found["placement_check"] = meta_device.names_a_meta_tensor(exc)

        class Ends(BaseException):
            pass

        class StandIn:  # a stage's stand-in: any attribute read ends the stage
            def __getattr__(self, name):
                raise Ends(name)

        def share(draft):
            draft.set_embed(None)

        try:
            share(StandIn())
        except Ends as exc:
            found["stand_in"] = meta_device.names_a_meta_tensor(exc)
    try:
        torch.arange(4, device="cuda")
        found["outside"] = "made"
    except Exception:
        found["outside"] = "refused"
    found["plain_error"] = meta_device.reads_a_value(ValueError("speculative_num_steps must be positive"))
    print(json.dumps(found))
''')


def test_gpu_placement_becomes_meta_and_values_are_never_invented(tmp_path: Path) -> None:
    require_release("0.5.23")
    python = environments.get("0.5.23").interpreter()
    script = tmp_path / "check.py"  # a file: the failing statement's source is read from it
    script.write_text(SCRIPT.format(root=str(Path(__file__).resolve().parents[2])))
    done = subprocess.run([python, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert {k: found[k] for k in ("arange", "index", "device_object", "to", "cuda_method")} == dict.fromkeys(
        ("arange", "index", "device_object", "to", "cuda_method"), "meta")
    assert found["cpu_stays"] == "cpu" and found["pinned"] == "cpu"
    assert found["shape"] == [4, 7]
    assert found["item_refused"] is True
    assert found["placement_check"] == "self.buffer"
    assert found["stand_in"] is None  # a stand-in local is never asked for its device (that read would end it)
    assert found["outside"] == "refused"  # the CPU build of torch: only inside the block
    assert found["plain_error"] is False


REGISTRY_SCRIPT = textwrap.dedent('''
    import json, sys
    sys.path.insert(0, {root!r})
    from bisect_spec.inside.launch import device_stops

    def refused(message):
        try:
            raise ValueError(message)
        except ValueError as exc:
            return device_stops._unregistered_here(exc)

    print(json.dumps({{
        "defined": refused("Cannot find model module. 'DeepseekV3ForCausalLMNextN' is not a registered model in the "
                           "Transformers library"),
        "unknown": refused("Cannot find model module. 'NoSuchModelForCausalLM' is not a registered model in the "
                           "Transformers library"),
        "older_words": refused("Model architectures ['LlamaForCausalLMEagle3'] are not supported for now."),
    }}))
''')


def test_the_registry_refusing_an_architecture_sglang_defines_is_a_stop_and_an_unknown_one_is_not(tmp_path: Path) -> None:
    # SGLang's registry skips a model module whose import fails; on a GPU install that module imports and registers
    # its class. The refusal is then this machine's, not the configuration's: a stop naming the module. An
    # architecture no module of sglang.srt.models defines stays SGLang's own verdict.
    require_release("0.5.23")
    script = tmp_path / "registry.py"
    script.write_text(REGISTRY_SCRIPT.format(root=str(Path(__file__).resolve().parents[2])))
    done = subprocess.run([environments.get("0.5.23").interpreter(), str(script)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["defined"] and "sglang.srt.models.deepseek_nextn" in found["defined"], found
    assert found["unknown"] is None
    assert found["older_words"] and "LlamaForCausalLMEagle3" in found["older_words"]
