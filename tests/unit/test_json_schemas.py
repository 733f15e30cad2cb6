"""The shipped JSON Schemas are themselves valid, documented, and cover every ``--json`` output.

Real outputs are validated where the tests that produce them run (``tests.schemas.assert_valid``
in the probe, sweep, runs, env, shrink, bisect, nightly, report, launch and crosscheck tests):
no command runs twice for its schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import click
import pytest
from jsonschema import Draft202012Validator

from bisect_spec.cli.commands import main
from tests.schemas import SCHEMAS, load, registry

NAMES = sorted(p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json"))
#: how a --help text names the schema of its JSON: ``schema bisect-spec/probe/1: bisect_spec/data/schemas/probe.schema.json``
NAMED = re.compile(r"schema (?P<id>bisect-spec/[a-z-]+/\d+): bisect_spec/data/schemas/(?P<file>[a-z-]+)\.schema\.json")


def test_the_schemas_are_shipped() -> None:
    assert {"common", "probe", "sweep", "shrink", "bisect", "commits", "nightly", "report", "launch", "crosscheck", "diff",
            "runs", "run-show", "envs", "strategies", "workers", "smoke"} == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_a_schema_is_valid_draft_2020_12_with_an_id_and_a_title(name: str) -> None:
    schema = load(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith(f"/{name}.schema.json")
    assert schema["title"] and schema["description"]


def _subschemas(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield where, node
        for key, value in node.items():
            yield from _subschemas(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _subschemas(value, f"{where}/{index}")


@pytest.mark.parametrize("name", NAMES)
def test_every_field_is_described_and_every_reference_resolves(name: str) -> None:
    schema = load(name)
    resolver = registry().resolver(base_uri=schema["$id"])
    undescribed = []
    for where, node in _subschemas(schema):
        if "$ref" in node:
            resolver.lookup(node["$ref"])  # raises when it does not resolve
        if where.endswith("/properties"):
            undescribed += [f"{where}/{field}" for field, sub in node.items() if "description" not in sub and "$ref" not in sub]
    assert undescribed == []


def _json_options() -> Iterator[tuple[str, click.Option]]:
    """Every option of every command that makes the command print JSON."""

    def walk(command: click.Command, path: str) -> Iterator[tuple[str, click.Option]]:
        for param in command.params:
            if isinstance(param, click.Option) and (param.name == "as_json" or (
                    isinstance(param.type, click.Choice) and "json" in param.type.choices)):
                yield path, param
        if isinstance(command, click.Group):
            for sub_name, sub in command.commands.items():
                yield from walk(sub, f"{path} {sub_name}".strip())

    yield from walk(main, "")


def test_every_json_output_names_its_shipped_schema_in_its_help() -> None:
    options = list(_json_options())
    assert len(options) >= 11
    named: set[str] = set()
    for command, option in options:
        found = NAMED.findall(option.help or "")
        assert found, f"{command} {option.opts[0]}: its help names no schema file"
        for schema_id, file in found:
            assert load(file)["properties"]["schema"]["const"] == schema_id, (command, file)
            named.add(file)
    assert named == set(NAMES) - {"common"}, "a shipped schema no command names"


def test_a_schema_rejects_what_its_output_never_holds() -> None:
    """The schemas say something: a wrong status, an unknown target key, a missing field all fail."""
    from tests.schemas import assert_valid

    target = {"release": "0.5.23", "model": "kimi-k2.6", "model_architecture": "X", "draft": None, "draft_algorithm": None,
              "hardware": "cpu"}
    outcome = {"status": "passed", "config": [], "release": "0.5.23", "python": "3.11.7", "hardware": "cpu"}
    good = {"schema": "bisect-spec/probe/1", "target": target, "notes": [], "outcome": outcome,
            "worker": {"sglang_version": "0.5.23", "python": "3.11.7", "hardware": "cpu"}}
    assert_valid(good, "probe")
    for broken in ({**good, "outcome": {**outcome, "status": "fine"}}, {**good, "target": {**target, "gpus": 8}},
                   {k: v for k, v in good.items() if k != "notes"}, {**good, "schema": "bisect-spec/probe/2"}):
        with pytest.raises(AssertionError, match="violation"):
            assert_valid(json.loads(json.dumps(broken)), "probe")


def test_the_readme_links_every_schema() -> None:
    readme = (SCHEMAS.parents[2] / "README.md").read_text()
    section = readme[readme.index("## JSON outputs"):]
    linked = set(re.findall(r"\]\(bisect_spec/data/schemas/([a-z-]+)\.schema\.json\)", section))
    assert linked == set(NAMES)
