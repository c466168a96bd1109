"""The drift report (medverify.ops.drift, `medverify ops report`): daily shares with Wilson
intervals from the run store's check runs, judged against the days before; claims recorded
before migration 12 count the same as new ones."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from medverify.cli import main
from medverify.config import OpsSettings
from medverify.errors import InputError
from medverify.ops.drift import drift_report, drifted, live_window, parse_since
from medverify.records import (
    Analysis,
    Answer,
    Arbitration,
    Claim,
    ClaimResult,
    Decision,
    Verdict,
)
from medverify.store.runs import RunStore

NOW = datetime(2025, 5, 20, 15, 30, tzinfo=UTC)
DAY = timedelta(days=1)


def _result(i: int, kind: str, decision: Decision | None = Decision.ACCEPT,
            confident: bool | None = True) -> ClaimResult:
    """A claim judged FACT, HALLUCINATION or ERROR by a real verdict (so that a report
    rebuilt from the stored JSON gives the same outcome)."""
    claim = Claim(id=f"c{i}", text=f"claim {i}")
    if kind == "ERROR":
        result = ClaimResult.failed(claim, "the judge endpoint answered 500")
    else:
        verdict = Verdict(claim_id=claim.id, factual=Analysis(holds=kind == "FACT"),
                          counterfactual=Analysis(holds=kind == "HALLUCINATION"),
                          confident=confident)
        result = ClaimResult.from_verdict(claim, [], verdict)
    assert result.category.value == kind
    if decision is None:
        return result
    return result.decided(Arbitration(decision=decision, rule="test", policy="p"))


def _run(store: RunStore, when: datetime, results: list[ClaimResult]) -> str:
    run_id = store.start_run(kind="check", config={}, models={}, prompt_versions={},
                             kb_snapshot=None)
    store.save_answer(run_id, 0, Answer(text="x"), results)
    store.finish_run(run_id, status="done", usage={})
    store._db.execute("UPDATE runs SET created_at = ? WHERE id = ?",
                      (when.isoformat(timespec="seconds"), run_id))
    return run_id


def _day(store: RunStore, when: datetime, errors: int, n: int = 100,
         escalate_errors: bool = True) -> None:
    results = [_result(i, "ERROR", Decision.ESCALATE if escalate_errors else Decision.FLAG)
               for i in range(errors)]
    results += [_result(i, "FACT") for i in range(errors, n)]
    _run(store, when, results)


@pytest.fixture
def store(store_location: Path | str) -> RunStore:
    """A run store in SQLite, and with ``-m database`` in PostgreSQL too (the counts are SQL
    both run)."""
    with RunStore(store_location) as db:
        yield db


def test_since_takes_a_span_or_a_date() -> None:
    assert parse_since("7d", NOW) == NOW - 7 * DAY
    assert parse_since("36h", NOW) == NOW - timedelta(hours=36)
    assert parse_since("2w", NOW) == NOW - 14 * DAY
    assert parse_since("2025-05-01", NOW) == datetime(2025, 5, 1, tzinfo=UTC)
    with pytest.raises(InputError, match="7d"):
        parse_since("last week", NOW)


def test_a_rise_of_the_error_share_past_its_margin_marks_the_day(store: RunStore) -> None:
    for back in range(1, 8):  # a week at 2 % ERROR
        _day(store, NOW - back * DAY, errors=2)
    _day(store, NOW - timedelta(hours=2), errors=30)  # today: 30 %
    found = drift_report(store, OpsSettings(), since=NOW - 7 * DAY, until=NOW)
    assert [d.label for d in found.days][-1] == "2025-05-20" and len(found.days) == 8
    today = found.days[-1]
    error = today.rates["ERROR"]
    assert (error.k, error.n, error.share) == (30, 100, 0.3)
    assert error.low is not None and 0.2 < error.low < 0.3 < (error.high or 0) < 0.4
    assert error.baseline == pytest.approx(14 / 700) and error.baseline_n == 700
    assert today.drifted == ["ERROR", "ESCALATE"] and error.drifted
    assert today.rates["FACT"].share == 0.7 and not today.rates["FACT"].drifted  # not watched
    assert today.rates["ACCEPT"].k == 70 and today.rates["ESCALATE"].k == 30
    # the first day has no baseline, the next ones a steady one: none is drifted
    assert not any(day.drifted for day in found.days[:-1])
    assert found.days[0].rates["ERROR"].baseline is None


def test_a_fall_is_watched_with_a_negative_margin(store: RunStore) -> None:
    for back in range(1, 4):
        _day(store, NOW - back * DAY, errors=2)
    _day(store, NOW - timedelta(hours=1), errors=30)
    settings = OpsSettings(margins={"FACT": -0.10}, baseline_days=3)
    today = drift_report(store, settings, since=NOW - timedelta(hours=1), until=NOW).days[-1]
    assert today.drifted == ["FACT"]
    assert not drift_report(store, OpsSettings(margins={"FACT": -0.30}, baseline_days=3),
                            since=NOW, until=NOW).days[-1].drifted


def test_too_few_claims_or_a_rise_within_noise_is_not_drift(store: RunStore) -> None:
    for back in range(1, 8):
        _day(store, NOW - back * DAY, errors=10)  # 10 % baseline
    _day(store, NOW - timedelta(hours=3), errors=4, n=20)  # 20 %: above 10 % + 5 points ...
    today = drift_report(store, OpsSettings(), since=NOW, until=NOW).days[-1]
    error = today.rates["ERROR"]
    assert error.share == 0.2 and error.low is not None and error.low < 0.10  # ... but noise
    assert not error.drifted
    _day(store, NOW - timedelta(hours=2), errors=15, n=15)  # now 19 of 35: far past ...
    assert drift_report(store, OpsSettings(min_claims=35), since=NOW,
                        until=NOW).days[-1].drifted == ["ERROR", "ESCALATE"]
    assert not drift_report(store, OpsSettings(min_claims=36), since=NOW,  # ... too few
                            until=NOW).days[-1].drifted
    # the rule itself, at its edges
    assert drifted(0.3, 0.21, 0.4, 0.2, 0.05, enough=True)
    assert not drifted(0.3, 0.19, 0.4, 0.2, 0.05, enough=True)  # interval reaches the baseline
    assert not drifted(0.25, 0.21, 0.3, 0.2, 0.05, enough=True)  # not past the margin
    assert not drifted(0.9, 0.8, 1.0, 0.0, 0.05, enough=False)
    assert not drifted(0.9, 0.8, 1.0, None, 0.05, enough=True)
    assert not drifted(0.9, 0.8, 1.0, 0.0, None, enough=True)


def test_claims_recorded_before_version_12_count_the_same(store: RunStore) -> None:
    results = [_result(0, "ERROR", Decision.ESCALATE), _result(1, "FACT"),
               _result(2, "HALLUCINATION", Decision.FLAG, confident=False),
               _result(3, "FACT", decision=None, confident=None)]
    _run(store, NOW - timedelta(hours=1), results)
    new = drift_report(store, OpsSettings(), since=NOW, until=NOW).days[-1]
    store._db.execute("UPDATE claims SET category = NULL, decision = NULL, confident = NULL")
    old = drift_report(store, OpsSettings(), since=NOW, until=NOW).days[-1]
    assert old == new
    rates = {name: rate.k for name, rate in new.rates.items()}
    assert rates == {"FACT": 2, "HALLUCINATION": 1, "JUDGMENT_ERROR": 0, "COVERAGE_GAP": 0,
                     "ERROR": 1, "ACCEPT": 1, "FLAG": 1, "ESCALATE": 1, "NOT_SURE": 1}
    assert new.claims == 4


def test_only_check_runs_and_the_window_count(store: RunStore) -> None:
    _day(store, NOW - 2 * DAY, errors=0)
    _day(store, NOW - timedelta(hours=30), errors=50)  # before the 24 h window
    _day(store, NOW - timedelta(hours=5), errors=40)
    other = store.start_run(kind="factcheck", config={}, models={}, prompt_versions={},
                            kb_snapshot=None)
    store.save_answer(other, 0, Answer(text="x"), [_result(0, "ERROR")])
    window = live_window(store, OpsSettings(baseline_days=1), now=NOW)
    assert window.label == "last 24 h" and window.claims == 100
    assert window.rates["ERROR"].share == 0.4
    assert window.rates["ERROR"].baseline == pytest.approx(0.5)  # hours 24-48 before
    assert window.start == datetime(2025, 5, 19, 16, tzinfo=UTC)


def test_the_command_prints_the_days_and_fails_on_drift(tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.db") as db:
        now = datetime.now(UTC)
        for back in range(1, 8):
            _day(db, now - back * DAY, errors=1)
        _day(db, now - timedelta(seconds=5), errors=40)
    store = str(tmp_path / "runs.db")
    runner = CliRunner()
    shown = runner.invoke(main, ["ops", "report", "--store", store, "--since", "2d",
                                 "--rate", "ERROR"])
    assert shown.exit_code == 0, shown.output
    assert "DRIFTED" in shown.output and "40.0" in shown.output and "FACT" not in shown.output
    as_json = runner.invoke(main, ["ops", "report", "--store", store, "--json"])
    days = json.loads(as_json.stdout)["days"]
    assert len(days) == 8 and days[-1]["drifted"] == ["ERROR", "ESCALATE"]
    failed = runner.invoke(main, ["ops", "report", "--store", store, "--fail-on-drift",
                                  "--json"])
    assert failed.exit_code == 1
    bad = runner.invoke(main, ["ops", "report", "--store", store, "--since", "soon"])
    assert bad.exit_code == 2 and "7d" in bad.output
