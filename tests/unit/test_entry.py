"""Ctrl-C while the console script is still importing the CLI: exit 130 and one line, no traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_ctrl_c_while_the_cli_is_imported_exits_130_without_a_traceback() -> None:
    program = textwrap.dedent("""
        import importlib.abc, sys

        class CtrlC(importlib.abc.MetaPathFinder):  # the user presses Ctrl-C while bisect_spec.cli.commands is imported
            def find_spec(self, name, path=None, target=None):
                if name == "bisect_spec.cli.commands":
                    raise KeyboardInterrupt
                return None

        sys.meta_path.insert(0, CtrlC())
        from bisect_spec.entry import run
        run()
    """)
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr, result.stdout) == (130, "interrupted\n", "")
