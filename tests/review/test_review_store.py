"""The review queue in the run store (store/review.py): items, the one- and two-reviewer
flows, adjudication, refusals that write nothing, Cohen's kappa, KB change records, and
labels from several processes at once."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from medverify.errors import InputError
from medverify.records import Claim
from medverify.review import (
    AlreadyLabelled,
    ItemClosed,
    ItemNotFound,
    KBChange,
    KBChangeNotFound,
    LabelRole,
    ReviewItem,
    ReviewLabel,
    ReviewStatus,
    check_source_url,
    cohen_kappa,
    deciding_label,
    review_item_id,
)
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore
from postgres_server import as_location
from process_context import racing_context

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def item(n: int, *, priority: float = 0.5, labels_needed: int = 1, topic: str | None = None,
         created: datetime | None = None, run_id: str = "run-1") -> ReviewItem:
    return ReviewItem(
        id=review_item_id(run_id, "a-1", f"c{n}"), run_id=run_id, answer_id="a-1",
        question="How is type 2 diabetes treated?", answer_text="Claims to check.",
        claim=Claim(id=f"c{n}", text=f"Claim number {n}."), category="COVERAGE_GAP",
        priority=priority, topic=topic, labels_needed=labels_needed,
        created_at=created or T0 + timedelta(minutes=n))


@pytest.fixture
def runs(store_location: Path | str) -> Iterator[RunStore]:
    with RunStore(store_location) as store:
        yield store


@pytest.fixture
def queue(runs: RunStore) -> ReviewStore:
    return ReviewStore(runs)


def _rows(runs: RunStore, table: str) -> int:
    return int(runs._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


# ----------------------------------------------------------------------- items


def test_item_ids_come_from_run_answer_and_claim() -> None:
    assert review_item_id("r", "a", "c1") == review_item_id("r", "a", "c1")
    assert len({review_item_id("r", "a", "c1"), review_item_id("r", "a", "c2"),
                review_item_id("r2", "a", "c1"), review_item_id(None, "a", "c1")}) == 4
    assert review_item_id("r", "a", "c1").startswith("rv-")


def test_adding_items_is_idempotent_and_the_queue_is_by_priority_then_age(
        queue: ReviewStore) -> None:
    items = [item(1, priority=0.2), item(2, priority=0.9), item(3, priority=0.9),
             item(4, priority=0.5, topic="diabetes")]
    assert queue.add_items(items) == 4
    assert queue.add_items(items) == 0  # the same escalations again: nothing new
    assert [i.claim.id for i in queue.list()] == ["c2", "c3", "c4", "c1"]
    assert [i.claim.id for i in queue.list(min_priority=0.5)] == ["c2", "c3", "c4"]
    assert [i.claim.id for i in queue.list(topic="diabetes")] == ["c4"]
    assert [i.claim.id for i in queue.list(limit=2, offset=1)] == ["c3", "c4"]
    assert queue.counts() == {"open": 4, "needs_second": 0, "adjudication": 0, "closed": 0}
    got = queue.get(items[1].id)
    assert got.question == items[1].question and got.status is ReviewStatus.OPEN
    assert got.created_at == items[1].created_at and got.labels == []


def test_unknown_items_are_item_not_found(queue: ReviewStore) -> None:
    with pytest.raises(ItemNotFound):
        queue.get("rv-nope")
    with pytest.raises(ItemNotFound):
        queue.label("rv-nope", "r1", ReviewLabel.FACT)
    with pytest.raises(ItemNotFound):
        queue.assign("rv-nope", "r1")


def test_assign(queue: ReviewStore) -> None:
    queue.add_items([item(1), item(2)])
    first = queue.list()[0]
    assert queue.assign(first.id, "rev-a").assignee == "rev-a"
    assert [i.id for i in queue.list(assignee="rev-a")] == [first.id]
    queue.label(first.id, "rev-a", ReviewLabel.FACT)
    with pytest.raises(ItemClosed):
        queue.assign(first.id, "rev-b")


# ----------------------------------------------------------------------- labelling


def test_one_reviewer_mode_closes_the_item_with_the_label(
        queue: ReviewStore, runs: RunStore) -> None:
    it = item(1)
    queue.add_items([it])
    done = queue.label(it.id, "rev-a", "HALLUCINATION", correction="  The dose is 500 mg. ",
                       source_url="https://example.org/metformin", note="checked")
    assert done.status is ReviewStatus.CLOSED and done.final_label is ReviewLabel.HALLUCINATION
    assert done.closed_at is not None
    [label] = done.labels
    assert label.role is LabelRole.FIRST and label.correction == "The dose is 500 mg."
    assert label.source_url == "https://example.org/metformin" and label.id > 0
    with pytest.raises(ItemClosed):
        queue.label(it.id, "rev-b", ReviewLabel.FACT)
    assert _rows(runs, "review_labels") == 1
    assert queue.counts()["closed"] == 1


def test_two_reviewers_who_agree_close_it(queue: ReviewStore) -> None:
    it = item(1, labels_needed=2)
    queue.add_items([it])
    first = queue.label(it.id, "rev-a", ReviewLabel.FACT)
    assert first.status is ReviewStatus.NEEDS_SECOND and first.final_label is None
    with pytest.raises(AlreadyLabelled):
        queue.label(it.id, "rev-a", ReviewLabel.HALLUCINATION)
    second = queue.label(it.id, "rev-b", ReviewLabel.FACT, source_url="https://example.org/x")
    assert second.status is ReviewStatus.CLOSED and second.final_label is ReviewLabel.FACT
    assert [x.role for x in second.labels] == [LabelRole.FIRST, LabelRole.SECOND]
    assert deciding_label(second).reviewer == "rev-b"  # the agreeing label with a source


def test_two_reviewers_who_disagree_go_to_adjudication(queue: ReviewStore,
                                                       runs: RunStore) -> None:
    it = item(1, labels_needed=2)
    queue.add_items([it])
    queue.label(it.id, "rev-a", ReviewLabel.FACT)
    split = queue.label(it.id, "rev-b", ReviewLabel.HALLUCINATION, correction="Not so.")
    assert split.status is ReviewStatus.ADJUDICATION and split.final_label is None
    for reviewer in ("rev-a", "rev-b"):  # the adjudicator must be a third reviewer
        with pytest.raises(AlreadyLabelled):
            queue.label(it.id, reviewer, ReviewLabel.FACT)
    done = queue.label(it.id, "rev-c", ReviewLabel.HALLUCINATION, correction="It is 500 mg.")
    assert done.status is ReviewStatus.CLOSED and done.final_label is ReviewLabel.HALLUCINATION
    assert [x.role for x in done.labels] == [LabelRole.FIRST, LabelRole.SECOND,
                                             LabelRole.ADJUDICATION]
    assert deciding_label(done).reviewer == "rev-c"
    with pytest.raises(ItemClosed):
        queue.label(it.id, "rev-d", ReviewLabel.FACT)
    assert _rows(runs, "review_labels") == 3


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/guideline", "http://10.0.0.5/x", "http://192.168.1.1/",
    "http://[::1]:8000/", "http://0x7f.1/", "http://2130706433/", "http://169.254.169.254/",
    "http://localhost:8080/x", "http://api.localhost/", "file:///etc/passwd",
    "ftp://example.org/x", "javascript:alert(1)", "not a url", "https://user:pw@example.org/",
])
def test_a_private_or_odd_source_url_is_refused_and_nothing_is_written(
        queue: ReviewStore, runs: RunStore, url: str) -> None:
    it = item(1)
    queue.add_items([it])
    with pytest.raises(InputError, match="source_url"):
        queue.label(it.id, "rev-a", ReviewLabel.FACT, source_url=url)
    assert _rows(runs, "review_labels") == 0
    assert queue.get(it.id).status is ReviewStatus.OPEN


def test_public_source_urls_pass() -> None:
    assert check_source_url("  https://www.nice.org.uk/guidance/ng28#section ") == \
        "https://www.nice.org.uk/guidance/ng28#section"
    assert check_source_url("http://8.8.8.8/x") == "http://8.8.8.8/x"
    assert check_source_url("") is None and check_source_url(None) is None


@pytest.mark.parametrize(("reviewer", "label", "extra"), [
    ("", "FACT", {}),
    ("rev-a", "MAYBE", {}),
    ("rev-a", "FACT", {"note": "x" * 5000}),
])
def test_invalid_labels_are_input_errors_that_write_nothing(
        queue: ReviewStore, runs: RunStore, reviewer: str, label: str,
        extra: dict[str, str]) -> None:
    it = item(1)
    queue.add_items([it])
    with pytest.raises(InputError):
        queue.label(it.id, reviewer, label, **extra)
    assert _rows(runs, "review_labels") == 0 and queue.get(it.id).status is ReviewStatus.OPEN


def test_a_failure_inside_the_transaction_leaves_no_half_row(
        queue: ReviewStore, runs: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    it = item(1)
    queue.add_items([it])
    from medverify.store import review as module

    def broken(*args: object) -> object:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(module, "_next", broken)
    with pytest.raises(RuntimeError):
        queue.label(it.id, "rev-a", ReviewLabel.FACT)
    assert _rows(runs, "review_labels") == 0 and not runs._db.in_transaction
    monkeypatch.undo()
    assert queue.label(it.id, "rev-a", ReviewLabel.FACT).status is ReviewStatus.CLOSED


def test_labels_since(queue: ReviewStore) -> None:
    queue.add_items([item(1), item(2)])
    queue.label(item(1).id, "rev-a", ReviewLabel.FACT)
    cut = datetime.now(UTC)
    queue.label(item(2).id, "rev-a", ReviewLabel.COVERAGE_GAP)
    assert [x.label for x in queue.labels()] == [ReviewLabel.FACT, ReviewLabel.COVERAGE_GAP]
    assert [x.label for x in queue.labels(since=cut)] == [ReviewLabel.COVERAGE_GAP]


# ----------------------------------------------------------------------- agreement


def test_cohen_kappa_on_a_hand_computed_example() -> None:
    a = list("FFFFFHHHCC")
    b = list("FFFFHHHCCC")
    # p_o = 8/10; p_e = (5*4 + 3*3 + 2*3) / 100 = 0.35; kappa = 0.45 / 0.65
    assert cohen_kappa(list(zip(a, b, strict=True))) == pytest.approx(0.45 / 0.65)
    assert cohen_kappa([("F", "F"), ("F", "F")]) is None  # one category: undefined
    assert cohen_kappa([]) is None
    assert cohen_kappa([("F", "H"), ("H", "F")]) == pytest.approx(-1.0)


def test_agreement_per_reviewer_pair(queue: ReviewStore) -> None:
    letters = {"F": "FACT", "H": "HALLUCINATION", "C": "COVERAGE_GAP"}
    a = list("FFFFFHHHCC")
    b = list("FFFFHHHCCC")
    items = [item(n, labels_needed=2) for n in range(10)]
    queue.add_items(items)
    for it, x, y in zip(items, a, b, strict=True):
        queue.label(it.id, "alice", letters[x])
        after = queue.label(it.id, "bob", letters[y])
        if after.status is ReviewStatus.ADJUDICATION:
            queue.label(it.id, "carol", letters[x])
    pairs = {(p.reviewer_a, p.reviewer_b): p for p in queue.agreement()}
    assert set(pairs) == {("alice", "bob"), ("alice", "carol"), ("bob", "carol")}
    ab = pairs["alice", "bob"]
    assert ab.n == 10 and ab.observed == pytest.approx(0.8)
    assert ab.kappa == pytest.approx(0.45 / 0.65)
    assert pairs["alice", "carol"].n == 2 and pairs["alice", "carol"].observed == 1.0
    assert pairs["bob", "carol"].observed == 0.0
    assert queue.counts()["closed"] == 10


# ----------------------------------------------------------------------- KB changes


def test_kb_changes_are_recorded_listed_and_reverted_once(queue: ReviewStore) -> None:
    it = item(1)
    queue.add_items([it])
    done = queue.label(it.id, "rev-a", ReviewLabel.FACT, source_url="https://example.org/")
    change = queue.record_kb_change(KBChange(
        item_id=it.id, label_id=done.labels[0].id, doc_id=f"review-{it.id}", kb_path="/kb",
        reviewer="rev-a", text=it.claim.text, source_url="https://example.org/",
        created_at=datetime.now(UTC)))
    assert change.id > 0 and change.reverted_at is None
    assert [c.id for c in queue.kb_changes()] == [change.id]
    assert [c.id for c in queue.kb_changes(item_id=it.id)] == [change.id]
    first = queue.mark_reverted(change.id)
    assert first.reverted_at is not None
    assert queue.mark_reverted(change.id).reverted_at == first.reverted_at
    assert queue.kb_changes() == [] and len(queue.kb_changes(include_reverted=True)) == 1
    with pytest.raises(KBChangeNotFound):
        queue.kb_change(999)
    with pytest.raises(InputError):  # a change must name a real item and label
        queue.record_kb_change(change.model_copy(update={"item_id": "rv-none"}))


# ----------------------------------------------------------------------- processes


def _label_at_once(path: str, item_id: str, reviewer: str, label: str, start: object,
                   out: object) -> None:
    with RunStore(as_location(path)) as runs:
        queue = ReviewStore(runs)
        start.wait(60)  # type: ignore[attr-defined]  # all start together
        try:
            got = queue.label(item_id, reviewer, label)
            result = "ok:" + next(x.role.value for x in got.labels if x.reviewer == reviewer)
        except (ItemClosed, AlreadyLabelled) as exc:
            result = type(exc).__name__
    out.put((reviewer, result))  # type: ignore[attr-defined]


def _race(path: Path | str, item_id: str, labels: list[str]) -> dict[str, str]:
    ctx = racing_context()
    start, out = ctx.Barrier(len(labels)), ctx.Queue()
    procs = [ctx.Process(target=_label_at_once,
                         args=(str(path), item_id, f"rev-{i}", label, start, out))
             for i, label in enumerate(labels)]
    for proc in procs:
        proc.start()
    results = dict(out.get(timeout=90) for _ in procs)
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    return results


def test_reviewers_labelling_at_once_from_processes_take_each_slot_once(
        store_location: Path | str) -> None:
    path = store_location
    single, double = item(1), item(2, labels_needed=2)
    with RunStore(path) as runs:
        ReviewStore(runs).add_items([single, double])
    one = _race(path, single.id, ["FACT"] * 3)
    assert sorted(one.values()) == ["ItemClosed", "ItemClosed", "ok:first"]
    two = _race(path, double.id, ["FACT"] * 3)
    assert sorted(two.values()) == ["ItemClosed", "ok:first", "ok:second"]
    with RunStore(path) as runs:
        queue = ReviewStore(runs)
        for it, n in ((single, 1), (double, 2)):
            got = queue.get(it.id)
            assert got.status is ReviewStatus.CLOSED and got.final_label is ReviewLabel.FACT
            assert len(got.labels) == n  # no half rows: one label per slot taken
        assert _rows(runs, "review_labels") == 3
