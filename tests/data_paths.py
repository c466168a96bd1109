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
grouped by reason. ``tests/conftest.py`` imports both hooks; ``pyproject.toml`` declares
the marker.
"""

from __future__ import annotations

import os
from collections import Counter
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


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("data"):
        require(*mark.args)


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
