"""The GPU check's pieces that run anywhere: the shell script's no-GPU path, the fidelity
comparison, the wheel slimming, and ``--sglang current`` keeping the user's import path."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome
from bisect_spec.runtime import environments
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


def test_gpu_check_script_parses() -> None:
    result = subprocess.run(["bash", "-n", str(SCRIPTS / "gpu_check.sh")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_gpu_check_says_first_that_there_is_no_gpu_and_exits_0(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out")}
    result = subprocess.run(["bash", str(SCRIPTS / "gpu_check.sh")], capture_output=True, text=True, env=env,
                            cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.splitlines()[0].startswith("no NVIDIA GPU found")
    assert not (tmp_path / "out").exists()  # nothing written when there is nothing to measure


def outcome(argv: list[str], record: dict[str, object]) -> Outcome:
    return Outcome.from_record(Config.from_argv(argv), dict(record), release="0.5.23", python="3.12", hardware="x")


FAILED: dict[str, object] = {"status": "failed", "exception": {"type": "AssertionError", "module": "builtins", "message": ""},
          "frame": {"file": "srt/server_args.py", "line": 10, "function": "_handle", "statement": "assert x is None"}}


def test_compare_lists_each_differing_field_with_both_values() -> None:
    fidelity = load_script("hardware_fidelity")
    same, differ, verdict = ["--page-size", "16"], ["--page-size", "64"], ["--speculative-num-steps", "1"]
    configs = [Config.from_argv(a) for a in (same, differ, verdict)]
    resolved = {"attention_backend": "fa3", "mem_fraction_static": 0.903}
    real = {c.key(): o for c, o in zip(configs, [
        outcome(same, {"status": "passed", "resolved": resolved}),
        outcome(differ, {"status": "passed", "resolved": resolved}),
        outcome(verdict, {"status": "passed", "resolved": resolved})], strict=True)}
    simulated = {c.key(): o for c, o in zip(configs, [
        outcome(same, {"status": "passed", "resolved": resolved}),
        outcome(differ, {"status": "passed", "resolved": {**resolved, "mem_fraction_static": 0.905}}),
        outcome(verdict, FAILED)], strict=True)}
    result = fidelity.compare(configs, real, simulated)
    assert (result["configs"], result["agreeing"]) == (3, 1)
    assert result["agreement_percent"] == pytest.approx(33.33)
    rows = {(tuple(d["config"]), d["field"]): d for d in result["disagreements"]}
    assert rows[(tuple(differ), "mem_fraction_static")]["real"] == 0.903
    assert rows[(tuple(differ), "mem_fraction_static")]["simulated"] == 0.905
    assert rows[(tuple(verdict), "verdict")]["real"] == "passed"
    assert rows[(tuple(verdict), "verdict")]["simulated"].startswith("failed:")
    assert rows[(tuple(verdict), "headline")]["simulated"].startswith("AssertionError")
    assert result["fields"]["mem_fraction_static"] == {"compared": 2, "differ": 1}  # where both pass
    assert result["fields"]["verdict"] == {"compared": 3, "differ": 1}


def test_profile_check_flags_fields_that_differ_from_the_machine() -> None:
    fidelity = load_script("hardware_fidelity")
    profile = {"gpu_name": "NVIDIA H200", "capability": [9, 0], "memory_mib": 143771, "cuda_version": "12.9"}
    facts = {"gpu_name": "NVIDIA H200", "capability": [9, 0], "memory_mib": 143000, "torch_version_cuda": "13.0",
             "smi_header": "NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0"}
    rows = {r["field"]: r for r in fidelity.profile_check(profile, facts)}
    assert rows["gpu_name"]["match"] is True
    assert rows["memory_mib"]["match"] is False
    assert rows["cuda_version (driver)"]["real"] == "13.0"
    assert rows["sm_count"]["match"] is None  # not reported: neither agreement nor disagreement


def make_wheel(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in members.items():
            wheel.writestr(name, data)
        wheel.writestr("pkg-1.0.dist-info/RECORD", "".join(f"{n},,\n" for n in members))


def test_slim_wheel_drops_members_and_rewrites_record(tmp_path: Path) -> None:
    slim = load_script("slim_wheel")
    source = tmp_path / "pkg-1.0-py3-none-any.whl"
    make_wheel(source, {"pkg/__init__.py": b"x = 1\n", "pkg/big/_ext.so": b"\0" * 1000,
                        "pkg-1.0.dist-info/METADATA": b"Name: pkg\nVersion: 1.0\n"})
    target, dropped = slim.slim(source, tmp_path / "out", ("pkg/big/*.so",))
    assert dropped == 1 and target.name == source.name
    with zipfile.ZipFile(target) as wheel:
        names = set(wheel.namelist())
        record = list(csv.reader(io.StringIO(wheel.read("pkg-1.0.dist-info/RECORD").decode())))
        assert "pkg/big/_ext.so" not in names
        for name, digest, size in record:
            if name.endswith("RECORD"):
                continue
            data = wheel.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={expected}", len(data))
        assert {r[0] for r in record} == names


def test_current_release_keeps_the_users_pythonpath(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/tmp/site", "", "/repo"]))
    environment = environments.get(environments.CURRENT)
    assert environment.pythonpath == ("/tmp/site", "/repo")
    assert environment.worker_spec(hardware=None, gpus=1).environment()["PYTHONPATH"] == os.pathsep.join(
        ["/tmp/site", "/repo"])
