"""Files several processes write at once: whole, never a staging file renamed away under another writer."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from bisect_spec.runtime.files import write_if_changed


def test_writers_of_one_profile_at_once_never_rename_each_others_staging_file(tmp_path: Path) -> None:
    # CI saw FileNotFoundError '.../config.tmp' -> '.../config.json': two test workers resolved one model at once
    path = tmp_path / "profiles" / "config.json"
    errors: list[BaseException] = []

    def write(text: str) -> None:
        try:
            for _ in range(200):
                write_if_changed(path, text)
        except BaseException as exc:  # collected, then asserted on
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(f'{{"n": {n}}}',)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert json.loads(path.read_text())["n"] in range(4)
    assert [p.name for p in path.parent.iterdir()] == ["config.json"]  # no staging file left behind


def test_a_launcher_gets_its_mode_even_when_its_text_is_already_there(tmp_path: Path) -> None:
    launcher = tmp_path / "bin" / "python"
    write_if_changed(launcher, "#!/bin/sh\n")
    launcher.chmod(0o644)
    write_if_changed(launcher, "#!/bin/sh\n", mode=0o755)
    assert launcher.stat().st_mode & 0o777 == 0o755
    assert launcher.read_text() == "#!/bin/sh\n"
