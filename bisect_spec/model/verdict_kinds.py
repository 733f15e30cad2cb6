"""The kinds of change ``bisect-spec diff`` reports, their order and what a gate refuses: the vocabulary
shared by the comparison (:mod:`bisect_spec.reduce.verdict_changes`) and its reports
(:mod:`bisect_spec.report.diff_text`)."""

from __future__ import annotations

#: the groups, in the order they are reported
KINDS = ("new", "wider", "defaults", "fixed", "narrower", "moved", "message", "replaced")
#: the groups a gate refuses (exit 3) unless ``--allow`` names them
GATED = frozenset({"new", "wider", "defaults"})
#: what each group means, in one line (reports' headings)
MEANING = {
    "new": "new failures: only the new side raises them",
    "wider": "known failures that now catch configurations the old side passed",
    "defaults": "silently changed defaults: both pass with the same flags, a resolved value differs",
    "fixed": "fixed failures: only the old side raises them",
    "narrower": "known failures that no longer catch configurations the new side passes",
    "moved": "moved failures: the same failure from another line, function or file",
    "message": "changed messages: the same failure at the same place, other words",
    "replaced": "configurations failing on both sides in two ways both sides know",
}
