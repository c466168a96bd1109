"""Sure verdicts overturned by clinicians (medverify.ops.overturns): per ISO week and judge,
from a real run store holding check runs, review items and labels (issue 42, item 3)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from medverify.config import OpsSettings
from medverify.ops.overturns import (
    UNKNOWN_JUDGE,
    below_target,
    iso_week,
    recent_window,
    sure_labels,
    sure_report,
    weekly,
)
from medverify.records import (
    Analysis,
    Answer,
    Arbitration,
    Category,
    Claim,
    ClaimResult,
    Decision,
    Verdict,
)
from medverify.review.records import ReviewLabel
from medverify.review.teaching import queue_reports
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)  # a Sunday: ISO week 2026-W49


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RunStore]:
    with RunStore(tmp_path / "runs.sqlite") as db:
        yield db


def _result(i: int, category: Category, judge: str, confident: bool | None,
            rule: str) -> ClaimResult:
    claim = Claim(id=f"c{i}", text=f"Drug {i} is given once daily.")
    verdict = Verdict(claim_id=claim.id, factual=Analysis(holds=category is Category.FACT),
                      counterfactual=Analysis(holds=category is Category.HALLUCINATION),
                      judge=judge, confident=confident)
    result = ClaimResult.from_verdict(claim, [], verdict)
    assert result.category is category
    return result.decided(Arbitration(
        decision=Decision.ESCALATE, rule=rule, policy="p",
        inputs={"category": category.value, "confident": confident}))


def _queue(store: RunStore, judge: str, rows: list[tuple[Category, bool | None, str, str]],
           closed: datetime) -> None:
    """One check run by ``judge`` whose claims (category, confident, rule, the clinician's
    label) are escalated, queued, labelled and closed at ``closed``."""
    results = [_result(i, c, judge, sure, rule) for i, (c, sure, rule, _) in enumerate(rows)]
    run_id = store.start_run(kind="check", config={}, models={}, prompt_versions={},
                             kb_snapshot=None)
    answer = Answer(id=f"a-{judge}-{closed.date()}", text="x")
    store.save_answer(run_id, 0, answer, results)
    store.finish_run(run_id, status="done", usage={})
    review = ReviewStore(store)
    assert queue_reports(review, store.reports(run_id)) == len(rows)
    items = {i.claim.id: i.id for i in review.list(limit=None) if i.run_id == run_id}
    for i, (*_, label) in enumerate(rows):
        review.label(items[f"c{i}"], "dr-a", ReviewLabel(label))
    store._db.execute("UPDATE review_items SET closed_at = ? WHERE run_id = ?",
                      (closed.isoformat(timespec="microseconds"), run_id))


FACT, HALL = Category.FACT, Category.HALLUCINATION


def test_sure_verdicts_are_counted_per_week_and_judge(store: RunStore) -> None:
    _queue(store, "builtin", [(FACT, True, "audit", "FACT"), (FACT, True, "audit", "HALLUCINATION"),
                              (HALL, True, "vetoed", "HALLUCINATION"),
                              (FACT, False, "not_sure_clinical", "HALLUCINATION"),  # not sure
                              (FACT, None, "fact_high_risk", "HALLUCINATION"),  # not assessed
                              (FACT, True, "audit", "CANNOT_TELL")],  # no answer
           NOW - timedelta(days=1))
    _queue(store, "llm", [(FACT, True, "audit", "COVERAGE_GAP")], NOW - timedelta(days=8))
    labels = sure_labels(store, NOW - timedelta(days=28), NOW)
    assert sorted((r.judge, r.category, r.label, r.audit) for r in labels) == [
        ("builtin", "FACT", "FACT", True), ("builtin", "FACT", "HALLUCINATION", True),
        ("builtin", "HALLUCINATION", "HALLUCINATION", False),
        ("llm", "FACT", "COVERAGE_GAP", True)]
    weeks = weekly(labels)
    assert [(w.period, w.judge, w.labelled, w.overturned) for w in weeks] == [
        ("2026-W48", "llm", 1, 1), ("2026-W49", "builtin", 3, 1)]
    builtin = weeks[1]
    assert builtin.precision == pytest.approx(2 / 3)
    assert builtin.low is not None and builtin.high is not None
    assert builtin.low < 2 / 3 < builtin.high
    assert (builtin.audited, builtin.audited_overturned) == (2, 1)
    assert weeks[0].precision == 0.0


def test_only_items_closed_in_the_window_count(store: RunStore) -> None:
    _queue(store, "builtin", [(FACT, True, "audit", "FACT")], NOW - timedelta(days=40))
    _queue(store, "builtin", [(FACT, True, "audit", "HALLUCINATION")], NOW - timedelta(days=2))
    [recent] = recent_window(store, 28, NOW)
    assert (recent.period, recent.labelled, recent.overturned) == ("last 28 d", 1, 1)
    assert sure_labels(store, NOW, NOW + timedelta(days=1)) == []


def test_an_old_item_with_confident_1_0_counts_and_a_lost_run_has_no_judge(
        store: RunStore) -> None:
    _queue(store, "builtin", [(FACT, True, "audit", "HALLUCINATION")], NOW - timedelta(days=1))
    item_id, body = store._db.execute("SELECT id, item FROM review_items").fetchone()
    item = json.loads(body)
    item["arbitration"]["inputs"]["confident"] = 1.0  # as stored before issue 43
    store._db.execute("UPDATE review_items SET item = ?, run_id = NULL WHERE id = ?",
                      (json.dumps(item), item_id))
    [row] = sure_labels(store, NOW - timedelta(days=7), NOW)
    assert (row.judge, row.overturned) == (UNKNOWN_JUDGE, True)


def test_a_rechecked_claim_counts_for_the_recheck_judge(store: RunStore) -> None:
    _queue(store, "builtin", [(FACT, True, "fact_high_risk", "FACT")], NOW - timedelta(days=1))
    item_id, body = store._db.execute("SELECT id, item FROM review_items").fetchone()
    item = json.loads(body)
    item["arbitration"]["recheck"] = {"judge": "llm-strong", "passages": 8,
                                      "category_before": "FACT", "decision_before": "ESCALATE",
                                      "rule_before": "fact_high_risk", "error": None}
    store._db.execute("UPDATE review_items SET item = ? WHERE id = ?",
                      (json.dumps(item), item_id))
    assert [r.judge for r in sure_labels(store, NOW - timedelta(days=7), NOW)] == [
        "llm-strong"]


def test_below_target_needs_enough_labels(store: RunStore) -> None:
    settings = OpsSettings(min_claims=3, sure_precision_target=0.7)
    _queue(store, "builtin", [(FACT, True, "audit", "HALLUCINATION")] * 1 +
           [(FACT, True, "audit", "FACT")], NOW - timedelta(days=1))
    found = sure_report(store, settings, NOW - timedelta(days=7), NOW)
    assert found.below_target == [] and found.recent[0].precision == 0.5  # 2 labels < 3
    _queue(store, "llm", [(FACT, True, "audit", "FACT")] * 2 +
           [(FACT, True, "audit", "HALLUCINATION")] * 2, NOW - timedelta(days=3))
    found = sure_report(store, settings, NOW - timedelta(days=7), NOW)
    assert found.below_target == ["llm"]
    llm = next(c for c in found.recent if c.judge == "llm")
    assert below_target(llm, settings) and not below_target(
        llm, OpsSettings(min_claims=3, sure_precision_target=0.5))
    assert [(w.period, w.judge) for w in found.weeks] == [("2026-W49", "builtin"),
                                                          ("2026-W49", "llm")]


def test_iso_weeks_run_monday_to_sunday() -> None:
    assert iso_week(datetime(2026, 12, 6, 23, 59, tzinfo=UTC)) == "2026-W49"
    assert iso_week(datetime(2026, 12, 7, tzinfo=UTC)) == "2026-W50"
    assert iso_week(datetime(2027, 1, 1, tzinfo=UTC)) == "2026-W53"
