"""Where the tests find the real data (``../shared/data`` beside the clone), and what a
test that needs it does when it is not there.

``MEDVERIFY_DATA`` names the data folder (a relative value is taken from the repository
root); unset, it is ``../shared/data`` from the repository root. A test says what it needs
with the ``data`` marker, paths relative to that folder (glob patterns allowed):

    @pytest.mark.data("answers/expertqa_val.jsonl")
    def test_...() -> None:
        path = data_path("answers/expertqa_val.jsonl")

Before the test runs, each path is checked (:func:`pytest_runtest_setup`). Missing, the test
is skipped with the missing path as the reason, except under ``CI=true``, where it fails:
CI runs with the data beside the clone, so a missing file there is a broken setup, never a
quiet skip. At the end of a run, :func:`pytest_terminal_summary` lists the skipped tests
grouped by reason. ``tests/conftest.py`` imports the hooks; ``pyproject.toml`` declares
the marker.

A test cannot bypass the marker: while a test sets up and runs, an audit hook
(:func:`sys.addaudithook`) watches every file opened and every folder listed in this
process, and a test that touches the data folder outside the paths its ``data`` markers
name fails, naming the path (:func:`pytest_runtest_call`). Child processes a test starts
are not watched; their tests declare what the child reads.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = "MEDVERIFY_DATA"
DEFAULT = ROOT.parent / "shared" / "data"
_GLOB = frozenset("*?[")


def data_root() -> Path:
    """The data folder: ``$MEDVERIFY_DATA`` (relative to the repository root), else
    ``../shared/data`` beside the clone."""
    value = os.environ.get(ENV, "").strip()
    return (ROOT / Path(value).expanduser()) if value else DEFAULT


def in_ci() -> bool:
    """Whether this run is CI (``CI=true``, as GitHub Actions and ``.ci/run`` set it)."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def data_path(relative: str = "") -> Path:
    """``relative`` under the data folder (not checked: the ``data`` marker checks)."""
    return data_root() / relative if relative else data_root()


def data_files(pattern: str) -> list[Path]:
    """The files matching ``pattern`` under the data folder, sorted; when none match, the
    pattern itself, so that a test parametrized over them is still collected once and its
    ``data`` marker skips it (or fails it under CI) with the reason."""
    found = sorted(data_root().glob(pattern))
    return found or [data_root() / pattern]


def missing(relative: str) -> str | None:
    """Why ``relative`` (a path or glob under the data folder; empty: the folder itself)
    cannot be used, or None when it is there."""
    root = data_root()
    if not root.is_dir():
        return f"no data folder at {root} (set {ENV})"
    if not relative:
        return None
    if _GLOB & set(relative):
        return None if any(root.glob(relative)) else f"nothing matches {relative} in {root}"
    return None if (root / relative).exists() else f"{relative} not found in {root}"


def require(*relatives: str) -> None:
    """Skip the running test (fail it under ``CI=true``) unless every path is there."""
    for relative in relatives or ("",):
        reason = missing(relative)
        if reason is not None:
            unavailable(reason)


def unavailable(reason: str) -> NoReturn:
    if in_ci():
        pytest.fail(f"CI=true and the test data is missing: {reason}", pytrace=False)
    pytest.skip(reason)


class _Guard:
    """The running test's declared data paths, and what it touched outside them."""

    def __init__(self) -> None:
        self.roots: tuple[str, ...] = ()
        self.allowed: tuple[str, ...] = ()
        self.touched: list[str] = []
        self.installed = False

    def watch(self, item: pytest.Item) -> None:
        root = data_root()
        self.roots = tuple({os.path.abspath(root), os.path.realpath(root)})
        marks = [arg for mark in item.iter_markers("data") for arg in (mark.args or ("",))]
        self.allowed = tuple(marks)
        self.touched = []
        if not self.installed:
            sys.addaudithook(self.audit)
            self.installed = True

    def stop(self) -> list[str]:
        self.roots = ()
        return self.touched

    def audit(self, event: str, args: tuple[object, ...]) -> None:
        if not self.roots or event not in _WATCHED:
            return
        target = args[0] if args else None
        if not isinstance(target, str | bytes | os.PathLike):
            return
        path = os.path.abspath(os.fsdecode(target))
        for root in self.roots:
            if path == root or path.startswith(root + os.sep):
                relative = os.path.relpath(path, root)
                if not declared(relative, self.allowed):
                    self.touched.append(relative)
                return


_WATCHED = frozenset({"open", "os.listdir", "os.scandir", "sqlite3.connect"})
_GUARD = _Guard()


def declared(relative: str, allowed: tuple[str, ...]) -> bool:
    """Whether ``relative`` (a path under the data folder) is covered by the ``data``
    marker arguments ``allowed``: the path itself, a file under a declared folder, a match
    of a declared glob, or a folder on the way to one (listed to find it)."""
    relative = "" if relative == "." else relative.replace(os.sep, "/")
    for arg in (a.strip("/") for a in allowed):
        if not arg or not relative or relative == arg or relative.startswith(arg + "/"):
            return True
        if fnmatch.fnmatchcase(relative, arg) or (arg + "/").startswith(relative + "/"):
            return True
    return False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    """Check the ``data`` markers' paths before any fixture, then watch the fixtures."""
    for mark in item.iter_markers("data"):
        require(*mark.args)
    return (yield from _watched(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _watched(item))


def _watched(item: pytest.Item) -> Generator[None, object, object]:
    """Run a phase of ``item``; fail it when it read the data folder outside what its
    ``data`` markers declare."""
    _GUARD.watch(item)
    try:
        result = yield
    finally:
        touched = _GUARD.stop()
    if touched:
        pytest.fail(f"the test read {', '.join(sorted(set(touched))[:5])} from the data folder "
                    f"({data_root()}) without declaring it: add @pytest.mark.data(...) "
                    "(tests/data_paths.py)", pytrace=False)
    return result


def skip_reason(report: pytest.TestReport) -> str:
    """The reason of a skipped test's report (``longrepr`` is ``(path, line, reason)``)."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple | list) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Skipped tests grouped by reason: how many, and in which files."""
    reports = [r for r in terminalreporter.stats.get("skipped", [])
               if getattr(r, "skipped", False)]
    if not reports:
        return
    groups: dict[str, Counter[str]] = {}
    for report in reports:
        where = (report.nodeid or str(report.location[0])).split("::")[0]
        groups.setdefault(skip_reason(report), Counter())[where] += 1
    terminalreporter.section(f"{len(reports)} skipped, by reason", sep="-")
    for reason, files in sorted(groups.items(), key=lambda kv: (-kv[1].total(), kv[0])):
        terminalreporter.line(f"{files.total():5d}  {reason}")
        terminalreporter.line("       " + ", ".join(f"{f} ({n})" for f, n in files.items()))
