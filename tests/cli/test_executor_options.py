"""``--executor`` / ``--address``: one clear line for every way the Ray executor cannot run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from bisect_spec.cli.commands import main
from tests.conftest import require_release
from tests.unit.test_executor_choice import closed_port

SWEEP = ["sweep", "--sglang", "0.5.23", "--strategy", "quick", "--no-cache", "--no-shrink"]


def one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


def test_an_unreachable_ray_address_is_one_line_and_no_run_is_created(tmp_path: Path) -> None:
    require_release("0.5.23")
    address = f"127.0.0.1:{closed_port()}"
    result = CliRunner().invoke(main, [*SWEEP, "--runs-dir", str(tmp_path / "runs"), "--executor", "ray",
                                       "--address", address])
    assert result.exit_code == 1
    assert one_error_line(result.output) == (f"Error: cannot connect to Ray at {address}: Connection refused "
                                             "(is `ray start --head` running there?)")
    assert not (tmp_path / "runs").exists()


def test_an_address_without_the_ray_executor_is_a_usage_error(tmp_path: Path) -> None:
    require_release("0.5.23")
    result = CliRunner().invoke(main, [*SWEEP, "--runs-dir", str(tmp_path / "runs"), "--address", "auto"])
    assert result.exit_code == 2
    assert one_error_line(result.output) == "Error: --address is for --executor ray; the local executor runs on this machine"


def test_missing_ray_names_the_extra_with_ray_hidden_by_a_fake_package(tmp_path: Path) -> None:
    """Ray is installed here (the dev extra), so a package that fails to import stands in for its absence."""
    require_release("0.5.23")
    hidden = tmp_path / "hide" / "ray"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    result = subprocess.run([sys.executable, "-m", "bisect_spec", *SWEEP, "--runs-dir", str(tmp_path / "runs"),
                             "--executor", "ray"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(tmp_path / "hide")},
                            cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == ("Error: the ray executor needs Ray, which is not installed: "
                                     "install the extra: pip install 'bisect-spec[ray]'")


def test_a_nightly_that_cannot_reach_ray_stops_instead_of_skipping_every_cell(tmp_path: Path) -> None:
    require_release("0.5.23")
    matrix = tmp_path / "matrix.toml"
    matrix.write_text('name = "ray-check"\nstrategy = "quick"\nreleases = ["0.5.23"]\nmodels = ["llama-3.1-8b"]\n'
                      'drafts = ["none"]\nhardware = ["h100"]\n')
    address = f"127.0.0.1:{closed_port()}"
    result = CliRunner().invoke(main, ["nightly", "--matrix", str(matrix), "--runs-dir", str(tmp_path / "nightlies"),
                                       "--no-install", "--executor", "ray", "--address", address])
    assert result.exit_code == 1
    assert one_error_line(result.output).startswith(f"Error: cannot connect to Ray at {address}")
