"""ReviewStore.add_items: a batch whose every claim already waits takes no write lock
(another process holding it does not block the add), and anything new still goes in."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from medverify.errors import InputError
from medverify.records import Claim
from medverify.review import ReviewItem, review_item_id
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore


def _item(run: str, text: str, *, labels_needed: int = 1) -> ReviewItem:
    return ReviewItem(
        id=review_item_id(run, "a-1", "c1"), run_id=run, answer_id="a-1", question="Q?",
        answer_text="A.", claim=Claim(id="c1", text=text), category="COVERAGE_GAP",
        priority=0.5, labels_needed=labels_needed, kb_lineage="lineage-1",
        created_at=datetime(2026, 3, 2, 9, 0, tzinfo=UTC))


def test_waiting_claims_skip_the_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with RunStore(path) as runs:
        queue = ReviewStore(runs)
        assert queue.add_items([_item("run-1", "Metformin lowers glucose.")]) == 1
        other = sqlite3.connect(path, isolation_level=None, timeout=0.1)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            started = time.monotonic()
            # the same claim (other case and spacing) from another run: it already waits
            assert queue.add_items([_item("run-2", "metformin  LOWERS glucose.")]) == 0
            assert time.monotonic() - started < 5
            with pytest.raises(InputError):  # still refused, waiting or not
                queue.add_items([_item("run-3", "Metformin lowers glucose.",
                                       labels_needed=3)])
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert queue.add_items([_item("run-4", "Metformin lowers glucose."),
                                _item("run-4b", "Insulin raises glucose.")]) == 1
        assert len(queue.list(limit=None)) == 2
