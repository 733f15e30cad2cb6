"""The stored form of journal records: what a record repeats is not written again, and reads back exactly.

A sweep journals every configuration's whole outcome, and most of a record says again what the
configuration or another record says already: ``key`` is ``config`` in its canonical form; ``argv``
is ``config`` with the run's environment, model path and extra arguments around it; ``given`` is
what SGLang's parser made of ``argv`` (the same words, typed); the signature, frame, traceback,
exception and resolved values are shared by every row that stopped at the same place. The main job
(4,192 configurations) journaled about 11 KB a record, 45 MB in all.

:func:`pack` gives a record's stored form (the record, less what it repeats, plus a ``"$"`` entry
saying how to rebuild it) and the blobs it needs that are not stored yet; :func:`expand` gives the
record back. A blob is any other field of 40 bytes or more, stored once in the run's ``blobs.jsonl``
under the digest of its canonical JSON; the run's argv around the configuration (environment,
``--model-path``, extra arguments, profile paths) is such a blob too, so a run's base argv is written
once. The caller writes (and syncs) a record's new blobs before the record: a kill between the two
leaves a blob nobody refers to, never a record without its blob.

Written by hand, not by a compressor: the journal is appended and fsync'd a record at a time and
must keep every record written before a ``kill -9``. A gzip or zstd stream cut mid-write loses what
follows its last flush point; compressing each line alone (zlib) left 10.5 MB of the main job's
45 MB, as lines nobody can read and that compress no further. The stored form leaves 9.5 MB of
lines plus 2.3 MB of blobs, still JSON, and gzip takes those to 0.94 MB once the run is finished
(:meth:`bisect_spec.runtime.store.Run.seal`). So what repeats is dropped by what it is, and
:func:`pack` expands each stored form and compares it with the record before it is used: a record
that would not come back byte for byte (in canonical JSON) is stored whole. A record without ``"$"``
(any record of an older run) is its own stored form.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections import ChainMap
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from bisect_spec.errors import UsageError
from bisect_spec.model.flags import Config, env_assignment

#: The key of a stored form that says how to rebuild the record (absent: the record is stored whole).
MARK = "$"
#: Fields shorter than this (canonical JSON) stay in the record: a reference costs about 30 bytes.
BLOB_MIN = 40
#: Fields that differ from record to record (stored in the record, or rebuilt from ``config``).
OWN = frozenset({"config", "argv", "given"})


def canonical_json(data: Any) -> str:
    """The one JSON text of ``data`` (keys sorted, no spaces): what digests and comparisons read."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(text: str) -> str:
    """A blob's name: 16 hex digits of the SHA-1 of its text (a clash with another text is stored inline)."""
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def pack(entry: dict[str, Any], stored: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The stored form of ``entry`` and the blobs it needs that ``stored`` (digest -> text) lacks.

    Only what :func:`expand` rebuilds identically is left out: the result is checked, and an
    ``entry`` that would not come back is returned whole with no new blobs.
    """
    outcome = entry.get("outcome")
    if MARK in entry or not isinstance(outcome, dict):
        return entry, {}
    new: dict[str, str] = {}

    def blob(value: Any) -> str | None:
        text = canonical_json(value)
        name = digest(text)
        if stored.get(name, new.get(name, text)) != text:
            return None  # another text has this digest: keep the value inline
        if name not in stored:
            new[name] = text
        return name

    mark: dict[str, Any] = {}
    kept = dict(outcome)
    config, argv, given = outcome.get("config"), outcome.get("argv"), outcome.get("given")
    if _words(config):
        if "key" in entry and entry["key"] == _config_key(config):
            mark["key"] = True
        template = argv_template(config, argv) if _words(argv) else None
        if template is not None and derive_argv(config, template) == argv and (name := blob(template)) is not None:
            mark["argv"] = name
            del kept["argv"]
    if _words(argv) and isinstance(given, dict):
        typed = given_of(argv)
        mark["given"] = {k: v for k, v in given.items() if k not in typed or canonical_json(typed[k]) != canonical_json(v)}
        if dropped := sorted(set(typed) - set(given)):
            mark["drop"] = dropped
        del kept["given"]
    refs = {}
    for field, value in outcome.items():
        if field not in OWN and len(canonical_json(value)) >= BLOB_MIN and (name := blob(value)) is not None:
            refs[field] = name
            del kept[field]
    if refs:
        mark["blobs"] = refs
    if not mark:
        return entry, {}
    packed = {k: v for k, v in entry.items() if not (k == "key" and mark.get("key"))}
    packed["outcome"] = kept
    packed[MARK] = mark
    if canonical_json(expand(packed, ChainMap(new, stored))) != canonical_json(entry):
        return entry, {}
    return packed, new


def expand(packed: dict[str, Any], blobs: Mapping[str, str]) -> dict[str, Any]:
    """The record ``packed`` stands for, its keys sorted at every level as a record read from its JSON line.

    :raises KeyError: a blob it refers to is not in ``blobs`` (the run's files were damaged).
    """
    mark = packed.get(MARK)
    if not isinstance(mark, dict):
        return packed
    outcome = dict(packed["outcome"])
    for field, name in mark.get("blobs", {}).items():
        outcome[field] = json.loads(blobs[name])  # parsed per record: no two records share a mutable value
    if "argv" in mark:
        outcome["argv"] = derive_argv(outcome["config"], json.loads(blobs[mark["argv"]]))
    if "given" in mark:
        given = given_of(outcome["argv"])
        for dest in mark.get("drop", ()):
            del given[dest]
        given.update(mark["given"])
        outcome["given"] = dict(sorted(given.items()))
    entry = {k: v for k, v in packed.items() if k != MARK}
    entry["outcome"] = dict(sorted(outcome.items()))
    if mark.get("key"):
        entry["key"] = _config_key(outcome["config"])
    return dict(sorted(entry.items()))


# -- argv around a configuration -----------------------------------------------------------------


def _split_env(tokens: Sequence[str]) -> tuple[list[str], list[str]]:
    """Leading ``VAR=value`` tokens, and the rest."""
    count = 0
    while count < len(tokens) and env_assignment(tokens[count]) is not None:
        count += 1
    return list(tokens[:count]), list(tokens[count:])


def argv_template(config: Sequence[str], argv: Sequence[str]) -> dict[str, Any] | None:
    """What ``argv`` adds to ``config``: the environment ``config`` does not set, the words before its flags, and
    the words its placeholders became (``@model`` -> a path); None where ``argv`` does not end with ``config``'s
    flags, word for word but the placeholders."""
    config_env, flags = _split_env(config)
    argv_env, rest = _split_env(argv)
    if len(rest) < len(flags):
        return None
    head, tail = rest[:len(rest) - len(flags)], rest[len(rest) - len(flags):]
    became: dict[str, str] = {}
    for word, given in zip(flags, tail, strict=True):
        if became.setdefault(word, given) != given:
            return None
    own = {name for name, _ in map(_assignment, config_env)}
    env = dict(pair for pair in map(_assignment, argv_env) if pair[0] not in own)
    return {"env": env, "head": head, "subst": {word: given for word, given in became.items() if word != given}}


def derive_argv(config: Sequence[str], template: Mapping[str, Any]) -> list[str]:
    """``config`` with ``template`` around it (:func:`argv_template`), as a session builds the argv: the
    environment merged and sorted by name, the head, then the flags with their placeholders replaced."""
    config_env, flags = _split_env(config)
    env = {**template["env"], **dict(map(_assignment, config_env))}
    substitute = template["subst"]
    return ([f"{name}={value}" for name, value in sorted(env.items())] + list(template["head"])
            + [substitute.get(word, word) for word in flags])


def _assignment(token: str) -> tuple[str, str]:
    pair = env_assignment(token)
    assert pair is not None  # _split_env kept only assignments
    return pair


# -- the parsed values of an argv -----------------------------------------------------------------


def given_of(argv: Sequence[str]) -> dict[str, Any]:
    """What an argparse parser makes of ``argv``'s flags, as a plain guess: ``--some-flag`` sets ``some_flag``,
    to True without words, to its word (an int or a float where it reads as one) or to the list of its words.
    :func:`pack` stores where SGLang's parser read otherwise."""
    words: dict[str, list[str]] = {}
    current: list[str] | None = None
    for token in argv:
        if token.startswith("--") and len(token) > 2:
            flag, eq, inline = token.partition("=")
            current = words[flag[2:].replace("-", "_")] = [inline] if eq else []
        elif current is not None:
            current.append(token)
    return {dest: True if not value else _typed(value[0]) if len(value) == 1 else [_typed(w) for w in value]
            for dest, value in sorted(words.items())}


def _typed(word: str) -> Any:
    for kind in (int, float):
        try:
            return kind(word)
        except ValueError:
            pass
    return word


def _words(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(word, str) for word in value)


def _config_key(config: Sequence[str]) -> str | None:
    try:
        return Config.from_argv(config).key()
    except UsageError:
        return None
