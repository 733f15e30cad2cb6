"""The stored form of journal records (:mod:`bisect_spec.runtime.compact`): every record comes back exactly.

The records are built here as a sweep builds them (a configuration, the argv a session makes of it, what a
parser typed, failures shared between rows), from a seeded generator, with the cases the stored form must
keep whole: a parser that reads a flag otherwise than the plain guess, an argv with another model path, a
record with no parsed values, a key that is not its configuration's.
"""

from __future__ import annotations

import json
import random
from typing import Any

from bisect_spec.model.flags import Config
from bisect_spec.runtime import compact

MODEL, DRAFT = "/models/kimi", "/models/kimi-eagle3"
TARGET_ENV = {"SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK": "1"}
#: flag -> (the words it may take, how the parser types them, its dest where the flag's name does not say it)
FLAGS: dict[str, tuple[list[list[str]], Any, str | None]] = {
    "--attention-backend": ([["fa3"], ["flashinfer"], ["triton"]], str, None),
    "--tp-size": ([["1"], ["8"]], int, None),
    "--mem-fraction-static": ([["0.8"], ["0.95"]], float, None),
    "--disable-cuda-graph": ([[]], None, None),
    "--lora-target-modules": ([["all"], ["q_proj", "v_proj"]], list, None),  # nargs: one word is a list too
    "--speculative-algo": ([["EAGLE3"]], str, "speculative_algorithm"),  # an alias: another dest
    "--speculative-draft-model-path": ([["@draft"]], str, None),
    "--speculative-num-steps": ([["1"], ["3"], ["abc"]], str, None),  # typed as text by the parser
}
ENV = {"SGLANG_ENABLE_SPEC_V2": ["0", "1"], "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK": ["0"]}
FAILURES = [{"signature": {"id": f"s{n}", "kind": "failed", "message": f"failure number {n} " * 3},
             "frame": {"file": f"srt/server_args_{n}.py", "line": 100 + n, "context": [[99, "if x:"], [100, "raise"]]},
             "exception": {"type": "ValueError", "message": f"failure number {n} " * 3}} for n in range(3)]


def parsed(flags: list[tuple[str, list[str]]], argv: list[str]) -> dict[str, Any]:
    """What the parser of :data:`FLAGS` makes of a row (independently of the guess the stored form makes)."""
    given: dict[str, Any] = {"model_path": argv[argv.index("--model-path") + 1], "trust_remote_code": True}
    for flag, words in flags:
        _, kind, dest = FLAGS[flag]
        words = [DRAFT if w == "@draft" else w for w in words]
        value = True if kind is None else words if kind is list else kind(words[0])
        given[dest or flag[2:].replace("-", "_")] = value
    return dict(sorted(given.items()))


def records(count: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for index in range(count):
        flags = sorted((flag, rng.choice(values)) for flag, (values, _, _) in FLAGS.items() if rng.random() < 0.7)
        env = {name: rng.choice(values) for name, values in ENV.items() if rng.random() < 0.5}
        items = tuple(sorted([*((name, (value,)) for name, value in env.items()), *((f, tuple(w)) for f, w in flags)]))
        config = Config(items).argv()
        model = MODEL if index % 9 else "/elsewhere/kimi"  # an outcome cached from another machine
        argv = ([f"{k}={v}" for k, v in sorted({**TARGET_ENV, **env}.items())] + ["--model-path", model,
                "--trust-remote-code"] + [DRAFT if w == "@draft" else w for w in Config(items).flag_argv()])
        outcome: dict[str, Any] = {"argv": argv, "config": config, "env": {**TARGET_ENV, **env}, "status": "passed",
                                   "release": "0.5.23", "python": "3.11.7", "hardware": "simulated:rtx-pro-6000x8",
                                   "seconds": round(rng.random(), 3), "stages_passed": ["parse", "resolve"]}
        if index % 5:
            outcome["given"] = parsed(flags, argv)
        if index % 3 == 0:
            outcome.update(FAILURES[rng.randrange(len(FAILURES))], status="failed")
        key = Config(items).key() if index % 11 else "a key that is not the configuration's"
        out.append({"phase": "cover", "index": index, "key": key, "cached": index % 4 == 0, "outcome": outcome})
    return out


def as_read(entry: dict[str, Any]) -> str:
    """The record as a reader of its JSON line gets it, key order included."""
    return json.dumps(json.loads(compact.canonical_json(entry)))


def test_the_stored_form_expands_to_the_same_records_and_repeats_nothing() -> None:
    stored: dict[str, str] = {}
    entries = records(120)
    forms = []
    for entry in entries:
        packed, new = compact.pack(entry, stored)
        assert not set(new) & set(stored), "a blob is written once"
        stored.update(new)
        forms.append(json.loads(compact.canonical_json(packed)))  # as read back from its line
    for entry, packed in zip(entries, forms, strict=True):
        assert json.dumps(compact.expand(packed, stored)) == as_read(entry)
        outcome = entry["outcome"]
        # what the record repeats is left out: its key, its argv around the configuration, the parsed values
        assert ("key" in packed) == (entry["key"] != Config.from_argv(outcome["config"]).key())
        assert "argv" not in packed["outcome"] and "given" not in packed["outcome"]
    # the failures, and each argv around the configurations (its model path, the environment the row does not
    # set, the draft path where the row names one), are stored once
    shared = {compact.canonical_json(f[field]) for f in FAILURES for field in f}
    assert shared <= set(stored.values())
    around = {(e["outcome"]["argv"][e["outcome"]["argv"].index("--model-path") + 1],
               tuple(sorted(Config.from_argv(e["outcome"]["config"]).env().keys() & TARGET_ENV.keys())),
               "@draft" in e["outcome"]["config"]) for e in entries}
    assert len({p[compact.MARK]["argv"] for p in forms}) == len(around)
    assert sum(len(compact.canonical_json(p)) for p in forms) + sum(map(len, stored.values())) < \
        sum(len(compact.canonical_json(e)) for e in entries) / 2


def test_what_the_plain_guess_reads_otherwise_is_stored_and_comes_back() -> None:
    entry = records(1)[0]
    outcome = entry["outcome"]
    outcome["config"] = ["--lora-target-modules", "all", "--speculative-algo", "EAGLE3", "--tp-size", "08"]
    outcome["argv"] = ["--model-path", MODEL, *outcome["config"]]
    outcome["given"] = {"lora_target_modules": ["all"], "model_path": MODEL, "speculative_algorithm": "EAGLE3",
                        "tp_size": 8}
    entry["key"] = Config.from_argv(outcome["config"]).key()
    packed, new = compact.pack(entry, {})
    assert packed[compact.MARK]["given"] == {"lora_target_modules": ["all"], "speculative_algorithm": "EAGLE3"}
    assert packed[compact.MARK]["drop"] == ["speculative_algo"]
    assert json.dumps(compact.expand(json.loads(compact.canonical_json(packed)), new)) == as_read(entry)


def test_a_record_the_stored_form_cannot_rebuild_is_stored_whole() -> None:
    plain = {"key": "k0", "index": 0}
    assert compact.pack(plain, {}) == (plain, {})
    assert compact.expand(plain, {}) is plain
    # a digest clash with another stored text: the value stays in the record
    entry = records(3)[0]
    _, new = compact.pack(entry, {})
    clash = {name: text + " " for name, text in new.items()}
    again, more = compact.pack(entry, clash)
    assert not set(more) & set(clash)
    assert json.dumps(compact.expand(json.loads(compact.canonical_json(again)), {**clash, **more})) == as_read(entry)
