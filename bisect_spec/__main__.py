"""``python -m bisect_spec``."""

from bisect_spec.entry import run

run()
