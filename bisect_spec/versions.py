"""The order of SGLang release names, in one place (pure: environments, reports and matrices share it)."""

from __future__ import annotations

import re


def version_key(version: str) -> tuple[int, ...]:
    """Sort key for release strings: 0.5.1 < 0.5.1.post1 < 0.5.1.post3 < 0.5.2 < 0.5.10rc1 < 0.5.10 < 0.5.10.post1.

    A release is (numbers..., stage, n): stage -1 for rc n, 0 for the release, 1 for post n.
    A name that is not a version (``main``, ``current``) sorts last.
    """
    match = re.match(r"^(\d+(?:\.\d+)*)(?:\.?(rc|post)(\d+))?$", version)
    if not match:
        return (1 << 30,)
    numbers = [int(part) for part in match.group(1).split(".")]
    numbers += [0] * (4 - len(numbers))
    stage = {"rc": -1, "post": 1}.get(match.group(2) or "", 0)
    return (*numbers, stage, int(match.group(3) or 0))
