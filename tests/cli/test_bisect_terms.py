"""``bisect``'s ends and terms (git bisect's old/new, good/bad, --fixed): one-line refusals, before anything is evaluated."""

from __future__ import annotations

import pytest

from bisect_spec.cli.commands import bisect_ends
from tests.cli.helpers import error_line, run

FLAGS = ["--", "--speculative-algorithm", "EAGLE3"]


@pytest.mark.parametrize(("args", "expected"), [
    (["--old", "0.5.23", "--new", "0.5.9"],
     "Error: --old 0.5.23 is newer than --new 0.5.9: --old is the older end (also when looking for a fix: add "
     "--fixed to call the verdicts broken and fixed)"),
    (["--old", "0.5.9", "--new", "0.5.9"], "Error: --old and --new are both 0.5.9: name two different releases"),
    (["--good", "0.5.9", "--bad", "0.5.9"], "Error: --good and --bad are both 0.5.9: name two different releases"),
    (["--good", "0.5.90"], "Error: --good 0.5.90 is not a known SGLang release (closest: 0.5.9"),
    (["--old", "0.5.3", "--bad", "0.5.9"], "Error: --good/--bad and --old/--new both name the ends: use one pair"),
    (["--good", "0.5.3", "--fixed"],
     "Error: --good/--bad name the verdicts good and bad already: drop --term-old, --term-new and --fixed"),
    (["--fixed", "--term-new", "works"], "Error: --fixed means --term-old broken --term-new fixed: drop one of them"),
    (["--term-old", "ok", "--term-new", "ok"], "Error: --term-old and --term-new are both 'ok': name the two verdicts "
                                               "differently"),
])
def test_bisect_ends_and_terms_are_refused_in_one_line(args: list[str], expected: str) -> None:
    code, output = run("bisect", *args, *FLAGS)
    assert code == 2 and error_line(output).startswith(expected), output


@pytest.mark.parametrize(("args", "expected"), [
    # git bisect's terms in either order: the older release is the old end, and its term names the old verdict
    ({"good": "0.4.6", "bad": "0.5.23"}, ("0.4.6", "0.5.23", ("good", "bad"), ("--good", "--bad"))),
    ({"good": "0.5.23", "bad": "0.4.6"}, ("0.4.6", "0.5.23", ("bad", "good"), ("--bad", "--good"))),
    ({"good": "0.5.3"}, ("0.5.3", None, ("good", "bad"), ("--good", "--bad"))),
    ({"old": "0.5.3", "fixed": True}, ("0.5.3", None, ("broken", "fixed"), ("--old", "--new"))),
    ({"new": "0.5.12", "term_old": "slow", "term_new": "fast"}, (None, "0.5.12", ("slow", "fast"), ("--old", "--new"))),
    ({}, (None, None, ("old", "new"), ("--old", "--new"))),
])
def test_bisect_ends_and_terms(args: dict[str, object], expected: tuple[object, ...]) -> None:
    given = {"old": None, "new": None, "good": None, "bad": None, "term_old": None, "term_new": None, "fixed": False,
             **args}
    assert bisect_ends(**given) == expected  # type: ignore[arg-type]
