"""Validating a ``--json`` document against its shipped JSON Schema (``bisect_spec/data/schemas``)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

import bisect_spec

SCHEMAS = Path(bisect_spec.__file__).parent / "data" / "schemas"


def load(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    return schema


@functools.cache
def registry() -> Registry[Any]:
    """Every shipped schema under its ``$id``: the documents refer to ``common.schema.json`` by it."""
    resources = [Resource.from_contents(json.loads(p.read_text())) for p in sorted(SCHEMAS.glob("*.schema.json"))]
    return Registry().with_resources((str(r.contents["$id"]), r) for r in resources)


def assert_valid(document: Any, name: str) -> None:
    """``document`` is valid under ``<name>.schema.json``; else fail naming every violation and where it is."""
    validator = jsonschema.Draft202012Validator(load(name), registry=registry())
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    assert not errors, f"{len(errors)} violation(s) of {name}.schema.json:\n" + "\n".join(
        f"  at /{'/'.join(str(p) for p in e.absolute_path)}: {e.message[:300]}" for e in errors[:20])
