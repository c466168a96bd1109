"""`medverify ops report` as printed (issue 43's findings): days without claims collapsed,
rate names never cut at 80 columns, the drifted column never blank; and its section on sure
verdicts overturned (issue 42)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner
from rich.console import Console

from medverify.cli import main
from medverify.cli.ops import _print, _print_sure
from medverify.config import DRIFT_RATES, OpsSettings
from medverify.ops.drift import drift_report
from medverify.ops.overturns import sure_report
from medverify.records import Category
from medverify.store.runs import RunStore
from ops.test_drift import _day
from ops.test_overturns import _queue

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def _shown(store: RunStore, since: datetime, settings: OpsSettings | None = None) -> str:
    out = io.StringIO()
    console = Console(file=out, width=80, color_system=None)
    _print(drift_report(store, settings or OpsSettings(), since, NOW), DRIFT_RATES, console)
    return out.getvalue()


def test_days_without_claims_are_one_row(tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.db") as db:
        _day(db, NOW - timedelta(hours=2), errors=3)
        shown = _shown(db, NOW - 7 * DAY)
    assert "2026-11-29 –" in shown and "2026-12-05" in shown
    assert shown.count("no claims") == 1 and shown.count("2026-12-0") == 2
    rows = [line for line in shown.splitlines() if line.strip()]
    # title, header, rule, the empty week (2 lines), the day's rates, 3 lines of footer
    assert len(rows) == 5 + len(DRIFT_RATES) + 3, shown


def test_rate_names_are_never_cut_at_80_columns(tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.db") as db:
        _day(db, NOW - timedelta(hours=2), errors=3)
        shown = _shown(db, NOW - DAY)
    assert "…" not in shown
    assert max(len(line) for line in shown.splitlines()) <= 80
    for name in DRIFT_RATES:
        assert f" {name} " in shown, name


def test_the_drifted_column_says_why_a_rate_is_not_drifted(tmp_path: Path) -> None:
    settings = OpsSettings(baseline_days=1, min_claims=20)
    with RunStore(tmp_path / "runs.db") as db:
        _day(db, NOW - timedelta(hours=2), errors=3)
        alone = _shown(db, NOW - timedelta(hours=3), settings)
        _day(db, NOW - DAY - timedelta(hours=2), errors=3)
        judged = _shown(db, NOW - timedelta(hours=3), settings)
        _day(db, NOW - 2 * DAY, errors=1, n=5)
        few = _shown(db, NOW - DAY - timedelta(hours=3), settings)
    error_row = next(line for line in alone.splitlines() if " ERROR " in line)
    assert "no baseline" in error_row
    assert "not watched" in next(line for line in alone.splitlines() if " FACT " in line)
    error_row = next(line for line in judged.splitlines() if " ERROR " in line)
    assert error_row.rstrip().endswith(" no") and "baseline" not in error_row
    assert "few claims" in few and "…" not in few


def test_the_command_shows_sure_verdicts_overturned(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    with RunStore(tmp_path / "runs.db") as db:
        _queue(db, "builtin", [(Category.FACT, True, "audit", "FACT"),
                               (Category.FACT, True, "audit", "HALLUCINATION")],
               now - timedelta(hours=1))
    store = str(tmp_path / "runs.db")
    shown = CliRunner().invoke(main, ["ops", "report", "--store", store, "--since", "1d"],
                               env={"COLUMNS": "100"})
    assert shown.exit_code == 0, shown.output
    row = next(line for line in shown.output.splitlines() if "last 28 d" in line)
    assert "builtin" in row and " 2 " in row and "50.0" in row and "1/2" in row
    assert "Below the target (70% kept" in shown.output
    as_json = CliRunner().invoke(main, ["ops", "report", "--store", store, "--json"])
    sure = json.loads(as_json.stdout)["sure_verdicts"]
    assert sure["recent"][0]["overturned"] == 1 and sure["below_target"] == []


def test_nothing_labelled_is_one_line(tmp_path: Path) -> None:
    out = io.StringIO()
    with RunStore(tmp_path / "runs.db") as db:
        _print_sure(sure_report(db, OpsSettings(), NOW - DAY, NOW),
                    Console(file=out, width=80, color_system=None))
    assert out.getvalue().startswith("Sure verdicts overturned: none labelled")
