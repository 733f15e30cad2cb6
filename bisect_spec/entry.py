"""The console script's entry: Ctrl-C is answered the same way from the first instant.

Importing the CLI (click, rich, the API) takes a third of a second on a quiet machine and
seconds on a busy one; a Ctrl-C in that window would otherwise print a ``KeyboardInterrupt``
traceback and exit -2. Only the import is guarded here: once :func:`bisect_spec.cli.commands.run`
runs, the CLI maps interruptions itself (exit 130, what was kept, how to resume).
"""

from __future__ import annotations

import sys

#: 128 + SIGINT, as shells report a command stopped by Ctrl-C.
EXIT_INTERRUPTED = 130


def run() -> None:
    """``bisect-spec``."""
    try:
        from bisect_spec.cli.commands import run as cli_run
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(EXIT_INTERRUPTED) from None
    cli_run()
