"""SGLang from a git clone or a source tree, laid over a release environment.

SGLang's Python package is pure Python, so a commit's ``python/sglang`` tree put first on
``PYTHONPATH`` ahead of a release's overlay imports in seconds, with that release's
dependencies: nothing is built. This module reads clones (through :func:`processes.capture`,
``git`` only; it never writes to the clone), extracts trees and names the environments made
from them.

A **source target** is what ``--sglang`` accepts besides a release:

``git:PATH@REV``  the ``python/sglang`` tree of REV (a commit, tag or branch; default HEAD) in the clone at PATH
``path:DIR``      an SGLang package on disk: a clone (``DIR/python/sglang``), ``DIR/sglang``, or the package itself

Its environment is the release at or before the tree's version (``sglang/_version.py`` or
``sglang/version.py``; for a commit without one, the newest tag before it) with the tree first
on the import path. :func:`register` turns a source target into a **label** that names it
exactly and is safe in file names, like a PEP 440 local version::

    0.5.1.post3+g6cebe0ab130f     commit 6cebe0ab130f's tree over SGLang 0.5.1.post3's environment
    0.5.1.post3+path.3f9a0c21d4   a directory over 0.5.1.post3 (the suffix is a digest of its place
                                  and its files' names, sizes and modification times: an edit is a new label)

A label is what a :class:`~bisect_spec.runtime.session.Target` carries as its release, so run ids,
worker logs and the outcome cache keep working unchanged; :func:`environment` finds what it
stands for in ``sources/<label>/source.json``.

On disk, under :func:`environments.home`::

    trees/<tree-hash>/sglang/      a commit's python/sglang (git archive of that path only), by git tree hash
    trees/<tree-hash>/tree.json    written last: {tree, bytes, version}; touched on every use
    sources/<label>/source.json    what a label stands for; the label's flag table is cached beside it

Trees are kept up to ``BISECT_SPEC_TREE_CACHE_MB`` (default 4000) in all; the least recently
used go first.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bisect_spec.errors import ReleaseError, SourceError
from bisect_spec.model.syntax import parse_module
from bisect_spec.runtime import environments, processes

#: Where SGLang's Python package lives in a clone.
PACKAGE_PATH = "python/sglang"
GIT_PREFIX = "git:"
PATH_PREFIX = "path:"
_LABEL = re.compile(r"^(?P<base>\d+(?:\.\d+)*(?:\.post\d+|rc\d+)?)\+(?P<kind>g|path\.)(?P<id>[0-9a-f]{10,40})$")
_VERSION_ASSIGNMENT = re.compile(r"^__version__\s*=\s*(?:version\s*=\s*)?[\"']([^\"']+)[\"']", re.MULTILINE)
_PR = re.compile(r"\(#(\d+)\)")


def is_source_spec(text: str | None) -> bool:
    """Whether ``text`` is a ``git:PATH@REV`` or ``path:DIR`` target."""
    return bool(text) and str(text).startswith((GIT_PREFIX, PATH_PREFIX))


def is_label(text: str | None) -> bool:
    """Whether ``text`` is a label made by :func:`register` (``0.5.1.post3+g6cebe0ab130f``)."""
    return bool(text) and _LABEL.match(str(text)) is not None


def base_of(label: str) -> str:
    """The release whose environment a label's tree is laid over."""
    match = _LABEL.match(label)
    if match is None:
        raise ValueError(f"not a source label: {label}")
    return match.group("base")


def pr_number(subject: str) -> int | None:
    """The pull request a commit subject names, GitHub's squash-merge way: ``Fix X (#12345)``."""
    found = _PR.findall(subject)
    return int(found[-1]) if found else None


# -- git ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Commit:
    """One commit as a report shows it."""

    sha: str
    parent: str | None  # the first parent
    date: str  # committer date, ISO 8601
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:12]

    @property
    def pr(self) -> int | None:
        return pr_number(self.subject)

    def to_dict(self) -> dict[str, Any]:
        return {"sha": self.sha, "short": self.short, "parent": self.parent, "date": self.date,
                "subject": self.subject, "pr": self.pr}


_FORMAT = "%H%x00%P%x00%cI%x00%s"


def _commit_from(line: str) -> Commit:
    sha, parents, date, subject = line.split("\x00", 3)
    first = parents.split()[0] if parents.split() else None
    return Commit(sha, first, date, subject)


class Repo:
    """A local SGLang clone, read with ``git`` (never written to).

    :raises SourceError: ``path`` is not a git clone, or git is not installed.
    """

    def __init__(self, path: str | Path) -> None:
        given = Path(path).expanduser()
        if not given.exists():
            raise SourceError(f"{path} does not exist: pass the directory of your SGLang clone "
                              "(git clone https://github.com/sgl-project/sglang)")
        top = self._git_at(given, "rev-parse", "--show-toplevel", what=f"{path} is not a git clone").decode().strip()
        self.path = Path(top)

    @staticmethod
    def _git_at(path: Path, *args: str, what: str) -> bytes:
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0"}
        try:
            code, out, err = processes.capture(["git", "-C", str(path), *args], env=env)
        except OSError as exc:
            raise SourceError(f"git is not installed here ({exc.strerror}); install git to use a clone") from exc
        if code != 0:
            last = [line for line in err.strip().splitlines() if line.strip()]
            raise SourceError(f"{what} ({last[-1]})" if last else what)
        return out

    def git(self, *args: str, what: str) -> str:
        """Run ``git`` in the clone; its stdout. :raises SourceError: ``what``, and git's last line."""
        return self._git_at(self.path, *args, what=what).decode(errors="replace")

    def succeeds(self, *args: str) -> bool:
        """Whether ``git ARGS`` exits 0 in the clone (a yes/no question such as ``merge-base --is-ancestor``)."""
        try:
            self._git_at(self.path, *args, what="")
        except SourceError:
            return False
        return True

    def archive(self, rev: str, path: str = PACKAGE_PATH) -> bytes:
        """``git archive`` of ``path`` at ``rev``, as tar bytes."""
        return self._git_at(self.path, "archive", "--format=tar", self.resolve(rev), path,
                            what=f"cannot archive {path} at {rev}")

    def resolve(self, rev: str) -> str:
        """The full hash of the commit ``rev`` names. :raises SourceError: no such revision."""
        return self.git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}",
                        what=f"'{rev}' is not a commit of {self.path}: name a commit, tag or branch "
                             "(git log --oneline shows them)").strip()

    def commit(self, rev: str) -> Commit:
        line = self.git("show", "-s", f"--format={_FORMAT}", self.resolve(rev), what=f"cannot read commit {rev}")
        return _commit_from(line.rstrip("\n"))

    def first_parent_commits(self, old: str, new: str, path: str = PACKAGE_PATH) -> list[Commit]:
        """Commits after ``old`` up to ``new`` on ``new``'s first-parent line that touch ``path``, oldest first.

        A merge counts as one commit (compared with its first parent), as ``git bisect
        --first-parent`` sees the history.
        :raises SourceError: ``old`` is not an ancestor of ``new``.
        """
        old_sha, new_sha = self.resolve(old), self.resolve(new)
        if not self.succeeds("merge-base", "--is-ancestor", old_sha, new_sha):
            raise SourceError(f"{old} is not an ancestor of {new} in {self.path}: pass --old REV older than --new REV")
        out = self.git("log", "--first-parent", "--reverse", f"--format={_FORMAT}", f"{old_sha}..{new_sha}", "--", path,
                       what=f"cannot list the commits between {old} and {new}")
        return [_commit_from(line) for line in out.splitlines() if line]

    def tree(self, rev: str, path: str = PACKAGE_PATH) -> str:
        """The git tree hash of ``path`` at ``rev`` (equal trees: equal code). :raises SourceError: no such path."""
        sha = self.resolve(rev)
        return self.git("rev-parse", "--verify", "--quiet", f"{sha}:{path}",
                        what=f"{rev} has no {path}: is {self.path} a clone of SGLang?").strip()

    def read(self, rev: str, path: str) -> str | None:
        """A file's text at ``rev``, or None where it does not exist."""
        try:
            return self.git("show", f"{self.resolve(rev)}:{path}", what=f"no {path} at {rev}")
        except SourceError:
            return None

    def changed_files(self, parent: str | None, rev: str, path: str = PACKAGE_PATH) -> list[str]:
        """Files under ``path`` that ``rev`` changed against ``parent`` (status letter, then path)."""
        if parent is None:
            return []
        out = self.git("diff", "--name-status", "--no-renames", parent, rev, "--", path,
                       what=f"cannot diff {parent[:12]}..{rev[:12]}")
        return [line.replace("\t", " ", 1) for line in out.splitlines() if line]

    def release_rev(self, release: str) -> str:
        """The tag of an SGLang release in the clone (``v0.5.2``, or ``0.5.2``).

        :raises SourceError: neither tag exists (naming how to fetch tags).
        """
        for name in (f"v{release}", release):
            if self.succeeds("rev-parse", "--verify", "--quiet", f"refs/tags/{name}"):
                return name
        raise SourceError(f"the clone at {self.path} has no tag v{release}: run git fetch --tags there, "
                          f"or pass --old REV --new REV")

    def nearest_tag_version(self, rev: str) -> str | None:
        """The version of the newest release tag at or before ``rev`` (``v0.5.2`` → ``0.5.2``)."""
        try:
            tag = self.git("describe", "--tags", "--abbrev=0", "--match", "v[0-9]*", self.resolve(rev),
                           what="no release tag").strip()
        except SourceError:
            return None
        return tag.removeprefix("v") or None


# -- trees ------------------------------------------------------------------------------------------


def _trees_dir() -> Path:
    return environments.home() / "trees"


def materialise(repo: Repo, rev: str) -> Path:
    """The directory holding ``rev``'s ``sglang`` package (``<dir>/sglang``), extracted once per tree hash.

    Only ``python/sglang`` is archived (``git archive REV python/sglang``); a tree already
    extracted (by any commit, from any clone) is reused.
    """
    tree = repo.tree(rev)
    directory = _trees_dir() / tree
    marker = directory / "tree.json"
    if marker.is_file():
        with contextlib.suppress(OSError):
            os.utime(marker)
        return directory
    data = repo.archive(rev)
    staging = directory.with_name(f"{tree}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(staging / "extract", filter="data")
    (staging / "extract" / PACKAGE_PATH).rename(staging / "sglang")
    shutil.rmtree(staging / "extract")
    size = sum(f.stat().st_size for f in (staging / "sglang").rglob("*") if f.is_file())
    (staging / "tree.json").write_text(json.dumps({"tree": tree, "bytes": size, "version": tree_version(staging)}))
    try:
        staging.rename(directory)
    except OSError:  # another process extracted the same tree meanwhile
        shutil.rmtree(staging, ignore_errors=True)
    _prune_trees(keep=tree)
    return directory


def _prune_trees(keep: str) -> None:
    """Drop the least recently used trees beyond ``BISECT_SPEC_TREE_CACHE_MB``."""
    budget = float(os.environ.get("BISECT_SPEC_TREE_CACHE_MB", "4000")) * 1e6
    entries = []
    for marker in _trees_dir().glob("*/tree.json"):
        with contextlib.suppress(OSError, ValueError):
            entries.append((marker.stat().st_mtime, int(json.loads(marker.read_text()).get("bytes", 0)), marker.parent))
    total = sum(size for _, size, _ in entries)
    for _, size, directory in sorted(entries, key=lambda e: e[0]):
        if total <= budget:
            break
        if directory.name != keep:
            (directory / "tree.json").unlink(missing_ok=True)
            shutil.rmtree(directory, ignore_errors=True)
            total -= size


def tree_version(root: Path) -> str | None:
    """The version a tree says it is: ``sglang/_version.py`` (setuptools-scm), else ``sglang/version.py``."""
    for name in ("_version.py", "version.py"):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            match = _VERSION_ASSIGNMENT.search((root / "sglang" / name).read_text())
            if match:
                return match.group(1)
    return None


def release_at_or_before(version: str) -> str:
    """The newest release (pins recorded, or installed) at or before ``version``.

    ``0.5.2`` → ``0.5.2``; ``0.5.13.dev20+gabc`` (a build before 0.5.13) → ``0.5.12.post1``.
    :raises SourceError: ``version`` is not a version, or older than every known release.
    """
    match = re.match(r"^v?(\d+(?:\.\d+)*)(?:\.?(rc|post)(\d+))?(?:\.?dev\d*)?(?:\+.*)?$", version.strip())
    if not match:
        raise SourceError(f"cannot read '{version}' as an SGLang version")
    base = match.group(1) + (f"{'.' if match.group(2) == 'post' else ''}{match.group(2)}{match.group(3)}"
                             if match.group(2) else "")
    key = environments.version_key(base)
    before_base = ".dev" in version or re.search(r"\d\.?dev", version) is not None
    pool = sorted(set(environments.known_releases()) | set(environments.installed()), key=environments.version_key)
    fitting = [r for r in pool if environments.version_key(r) < key or (not before_base and environments.version_key(r) == key)]
    if not fitting:
        raise SourceError(f"SGLang {version} is older than every release bisect-spec knows ({pool[0]})")
    return fitting[-1]


def _fingerprint(package: Path) -> str:
    """A digest of a package directory's place, file names, sizes and modification times (no file is read)."""
    digest = hashlib.sha256(f"{package.resolve()}\n".encode())
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            stat = path.stat()
            digest.update(f"{path.relative_to(package)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:10]


def _package_root(directory: Path) -> Path:
    """The directory to put on the import path for ``path:DIR`` (the one holding ``sglang/``)."""
    for root in (directory / "python", directory, directory.parent):
        if (root / "sglang" / "__init__.py").is_file() and (root != directory.parent or directory.name == "sglang"):
            return root
    raise SourceError(f"{directory} holds no SGLang package: pass a clone (with python/sglang), "
                      "a directory holding sglang/, or the sglang package directory itself")


# -- labels ---------------------------------------------------------------------------------------------


def _registry(label: str) -> Path:
    return environments.home() / "sources" / label


def parse_git_spec(spec: str) -> tuple[str, str]:
    """``git:PATH@REV`` → (PATH, REV); REV defaults to HEAD (``git:PATH``)."""
    body = spec.removeprefix(GIT_PREFIX)
    path, at, rev = body.rpartition("@")
    if not at or (not Path(path).expanduser().exists() and Path(body).expanduser().exists()):
        path, rev = body, "HEAD"  # no @REV, or an @ that belongs to the directory's name
    if not path:
        raise SourceError(f"'{spec}' names no clone: write git:PATH@REV, e.g. git:~/sglang@v0.5.2")
    return path, rev or "HEAD"


def register(spec: str, *, base: str | None = None) -> str:
    """Turn a ``git:PATH@REV`` or ``path:DIR`` target into its label (recorded for :func:`environment`).

    :param base: the release environment to lay the tree over (default: the release at or
        before the tree's version).
    :raises SourceError: no such clone, revision or package; a version that is no release.
    """
    record: dict[str, Any]
    if spec.startswith(GIT_PREFIX):
        path, rev = parse_git_spec(spec)
        repo = Repo(path)
        sha = repo.resolve(rev)
        root = materialise(repo, sha)
        version = tree_version(root) or repo.nearest_tag_version(sha)
        if version is None:
            raise SourceError(f"cannot tell which release {rev} is (no sglang/version.py, no v* tag before it): "
                              "run git fetch --tags in the clone")
        base = base or _installed_base(version, f"{rev} is SGLang {version}")
        label = f"{base}+g{sha[:12]}"
        record = {"kind": "git", "spec": spec, "repo": str(repo.path), "rev": rev, "commit": sha,
                  "tree": repo.tree(sha), "version": version}
    elif spec.startswith(PATH_PREFIX):
        directory = Path(spec.removeprefix(PATH_PREFIX)).expanduser().resolve()
        if not directory.is_dir():
            raise SourceError(f"{directory} is not a directory: write path:DIR with DIR your SGLang checkout")
        root = _package_root(directory)
        version = tree_version(root)
        if version is None:
            raise SourceError(f"cannot tell which release {root / 'sglang'} is: it has no version.py or _version.py")
        base = base or _installed_base(version, f"{root / 'sglang'} is SGLang {version}")
        fingerprint = _fingerprint(root / "sglang")
        label = f"{base}+path.{fingerprint}"
        record = {"kind": "path", "spec": spec, "root": str(root), "fingerprint": fingerprint, "version": version}
    else:
        raise SourceError(f"'{spec}' is not a source target: write git:PATH@REV or path:DIR")
    record.update(label=label, base=base, registered_at=time.time())
    directory = _registry(label)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f"source.json.{os.getpid()}"  # rewritten: the clone may have moved since
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(directory / "source.json")
    return label


def release_under(spec: str) -> str:
    """The release whose environment a ``git:PATH@REV`` or ``path:DIR`` target runs over (the release at or
    before the tree's version), installed or not: what ``env install git:…`` installs.

    :raises SourceError: no such clone, revision or package; a version that is no release.
    """
    if spec.startswith(GIT_PREFIX):
        path, rev = parse_git_spec(spec)
        repo = Repo(path)
        sha = repo.resolve(rev)
        version = tree_version(materialise(repo, sha)) or repo.nearest_tag_version(sha)
        if version is None:
            raise SourceError(f"cannot tell which release {rev} is (no sglang/version.py, no v* tag before it): "
                              "run git fetch --tags in the clone")
    elif spec.startswith(PATH_PREFIX):
        directory = Path(spec.removeprefix(PATH_PREFIX)).expanduser().resolve()
        if not directory.is_dir():
            raise SourceError(f"{directory} is not a directory: write path:DIR with DIR your SGLang checkout")
        version = tree_version(_package_root(directory))
        if version is None:
            raise SourceError(f"cannot tell which release {directory} is: it has no version.py or _version.py")
    else:
        raise SourceError(f"'{spec}' is not a source target: write git:PATH@REV or path:DIR")
    return release_at_or_before(version)


def _installed_base(version: str, what: str) -> str:
    base = release_at_or_before(version)
    if not environments.is_installed(base):
        raise ReleaseError(f"{what}: it runs over the environment of SGLang {base}, the release at or before it, "
                           f"which is not installed; run: bisect-spec env install {base}")
    return base


def describe(label: str) -> dict[str, Any]:
    """What a label stands for (``source.json``). :raises ReleaseError: an unknown label."""
    path = _registry(label) / "source.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        raise ReleaseError(f"{label} names no source tree known here (no {path}); "
                           "pass --sglang git:PATH@REV or path:DIR again") from None
    return data


def summary(label: str) -> str:
    """One line: which tree, laid over which release's environment."""
    data = describe(label)
    what = (f"the {PACKAGE_PATH} tree of commit {data['commit'][:12]} ({data['rev']}) in {data['repo']}"
            if data["kind"] == "git" else f"the SGLang package in {data['root']}")
    return f"{label}: {what}, version {data['version']}, over the SGLang {data['base']} environment"


def environment_for(release: str) -> environments.Environment:
    """The environment of a release or of a source tree's label (a commit's or a directory's tree
    over a release): what every caller that takes a user's ``--sglang`` uses.

    :raises ReleaseError: not installed (naming the install command), or the tree is gone.
    """
    return environment(release) if is_label(release) else environments.get(release)


def environment(label: str, base: environments.Environment | None = None) -> environments.Environment:
    """The environment a label stands for: its tree first on the import path, then the base release's.

    :raises ReleaseError: the base release is not installed (naming the install command), the
        clone is gone and the tree is no longer cached, or the directory changed since.
    """
    data = describe(label)
    base = base or environments.get(data["base"])
    if data["kind"] == "git":
        cached = _trees_dir() / data["tree"]
        if (cached / "tree.json").is_file():
            root = cached
            with contextlib.suppress(OSError):
                os.utime(cached / "tree.json")
        else:
            try:
                root = materialise(Repo(data["repo"]), data["commit"])
            except SourceError as exc:
                raise ReleaseError(f"the tree of {label} is no longer cached and the clone cannot give it: {exc}") from exc
    else:
        root = Path(data["root"])
        if not (root / "sglang").is_dir() or _fingerprint(root / "sglang") != data["fingerprint"]:
            raise ReleaseError(f"{root / 'sglang'} changed since it was named {label}: "
                               f"pass --sglang path:{data['spec'].removeprefix(PATH_PREFIX)} again")
    return overlay(base, root, label, _registry(label))


def overlay(base: environments.Environment, root: Path, label: str, path: Path | None) -> environments.Environment:
    """``base`` with the package directory ``root`` first on the import path."""
    return environments.Environment(label, base.python, (str(root), *base.pythonpath), base.torchvision_shim, path)


# -- code of one function (for the diff a commit report shows) ---------------------------------------------------


def function_source(text: str | None, function: str) -> tuple[int, str] | None:
    """(first line, source) of the first definition of ``function`` in a module's text, or None."""
    if not text:
        return None
    try:
        module = parse_module(text)
    except SyntaxError:
        return None
    lines = text.splitlines()
    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return start, "\n".join(lines[start - 1: node.end_lineno or node.lineno])
    return None
