"""``python -m bisect_spec``."""

from bisect_spec.cli import run

run()
