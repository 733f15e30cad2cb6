"""Release ordering, ranges and the "unavailable" record (no SGLang needed)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bisect_spec.errors import ReleaseError, ReleaseUnavailable, UsageError
from bisect_spec.runtime import environments


def test_post_and_rc_releases_sort_between_their_neighbours() -> None:
    shuffled = ["0.5.10.post1", "0.4.10", "0.5.1.post3", "0.4.6.post5", "0.5.10", "0.5.2", "0.4.6", "0.5.10rc1",
                "0.4.9.post6", "0.5.1", "0.4.6.post1"]
    assert sorted(shuffled, key=environments.version_key) == [
        "0.4.6", "0.4.6.post1", "0.4.6.post5", "0.4.9.post6", "0.4.10", "0.5.1", "0.5.1.post3", "0.5.2",
        "0.5.10rc1", "0.5.10", "0.5.10.post1"]


def test_every_release_from_0_4_6_to_0_5_23_has_pins_including_post_releases() -> None:
    releases = environments.available_releases()
    assert releases[0] == "0.4.6" and releases[-1] == "0.5.23"
    assert {"0.4.6.post5", "0.4.10.post2", "0.5.1.post3", "0.5.3.post3", "0.5.12.post1", "0.5.15.post1"} <= set(releases)
    assert len(releases) == 62
    assert releases == sorted(releases, key=environments.version_key)


def test_every_layer_a_release_names_is_defined() -> None:
    pins = environments.pins()
    named = {layer for entry in pins["releases"].values() for layer in entry.get("layers", [])}
    assert named <= set(pins["layers"])
    # transformers 4.x checks huggingface_hub<1.0 at import: every 4.x layer carries one
    for name, packages in pins["layers"].items():
        if name.startswith("transformers-4."):
            assert any(p.startswith("huggingface_hub==0.") for p in packages), name


def test_a_range_is_inclusive_and_ordered() -> None:
    chosen = environments.select_releases(["0.5.1..0.5.3"])
    assert chosen == ["0.5.1", "0.5.1.post1", "0.5.1.post2", "0.5.1.post3", "0.5.2", "0.5.3"]


def test_open_ended_ranges_run_to_the_oldest_and_newest() -> None:
    assert environments.select_releases(["..0.4.6.post2"]) == ["0.4.6", "0.4.6.post1", "0.4.6.post2"]
    assert environments.select_releases(["0.5.22.."]) == ["0.5.22", "0.5.23"]


def test_ranges_and_single_releases_merge_without_duplicates() -> None:
    assert environments.select_releases(["0.5.23", "0.5.22..0.5.23", "0.5.9"]) == ["0.5.9", "0.5.22", "0.5.23"]


def test_all_covers_every_release_with_pins() -> None:
    assert environments.select_releases([], all_releases=True) == environments.available_releases()


@pytest.mark.parametrize(("spec", "message"), [
    ("0.5.23..0.4.6", r"runs backwards: write 0\.4\.6\.\.0\.5\.23"),
    ("banana..0.5.3", "'banana' is not an SGLang release"),
    ("0.3.0..0.3.9", "no release with recorded pins lies in 0.3.0..0.3.9"),
    ("current", "nothing to install"),
])
def test_bad_release_specs_are_usage_errors(spec: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        environments.select_releases([spec])


@pytest.fixture
def empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("BISECT_SPEC_HOME", str(tmp_path))

    def no_base(*args: object, **kwargs: object) -> Path:
        raise AssertionError("an unavailable release must be refused before any install work")

    monkeypatch.setattr(environments, "ensure_base", no_base)
    yield tmp_path


def test_a_release_recorded_unavailable_is_refused_at_once_with_its_reason(empty_home: Path) -> None:
    environments._mark_unavailable("0.4.8", "does not import: ImportError: cannot import name 'x'")
    record = json.loads((empty_home / "envs" / "sglang-0.4.8" / "unavailable.json").read_text())
    assert record["status"] == "unavailable" and record["reason"].startswith("does not import")
    for call in (environments.install, environments.ensure, environments.get):
        with pytest.raises(ReleaseUnavailable) as caught:
            call("0.4.8")
        assert caught.value.reason == "does not import: ImportError: cannot import name 'x'"
        assert "retry with: bisect-spec env install --retry 0.4.8" in str(caught.value)
    assert not environments.is_installed("0.4.8")
    assert environments.installed() == []
    assert environments.unavailable() == {"0.4.8": "does not import: ImportError: cannot import name 'x'"}


def test_retry_ignores_the_record_and_remove_forgets_it(empty_home: Path) -> None:
    environments._mark_unavailable("0.4.8", "does not import")
    with pytest.raises(AssertionError, match="refused before any install work"):
        environments.install("0.4.8", retry=True)  # it got past the record, to the install
    environments.remove("0.4.8")
    assert environments.unavailable_reason("0.4.8") is None


def test_unavailable_is_a_release_error_so_existing_handlers_catch_it() -> None:
    assert issubclass(ReleaseUnavailable, ReleaseError)
    assert ReleaseUnavailable("0.4.8", "why").exit_code == 1


def test_release_lists_in_hints_collapse_into_runs_of_installed_releases(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BISECT_SPEC_HOME", str(tmp_path))
    for release in ("0.4.6", "0.4.9", "0.5.1", "0.5.3", "0.5.9", "0.5.12", "0.5.23"):
        (tmp_path / "envs" / f"sglang-{release}").mkdir(parents=True)
        (tmp_path / "envs" / f"sglang-{release}" / "env.json").write_text("{}")
    assert environments.spans(["0.5.9", "0.4.6", "0.4.9", "0.5.1", "0.5.3", "0.5.23"]) == "0.4.6 ... 0.5.9, 0.5.23"
    assert environments.spans(["0.5.12", "0.5.23"]) == "0.5.12, 0.5.23"
    assert environments.spans(["0.5.3"]) == "0.5.3"
