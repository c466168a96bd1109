"""SIGKILL of the server while reviewers are labelling loses no submitted label.

``medverify serve`` runs in a subprocess (two uvicorn workers, so labels of one item can
race in two processes) on a run store that holds escalated review items: half of them
settled by one label, half by two (a disagreement goes to adjudication by a third).
Three reviewer keys label every item concurrently, from threads, through ``POST
/v1/review/items/{id}/labels``, each in its own seeded order and with a seeded label
(FACT or HALLUCINATION, so that second reviewers disagree about half the time). The
server's process group is SIGKILLed twice, at seeded moments while labels are in flight,
and restarted on the same store and port; the reviewers carry on.

A request refused before it reached the server (connection refused while the server is
down) is sent again once the test has seen the server back up (``Reviewers.up``): sent
blindly every 50 ms, the requests reached the new server before the test's health poll did,
and the reviewers could finish every label before the test looked, so the next kill found
nothing in flight (issue 45: a faster request path made that likely). A request that died
with its connection is *unsure* (it may or may not have been written) and is not sent
again. At the end, in the store:

* every label answered 2xx is there exactly once, as it was answered (id, role, label);
* every unsure label is either there whole (and counted in its item's status) or absent;
* no item has more labels than its slots, one label per reviewer and per role;
* no half-written rows: each item's status, final label and closing time are what its
  labels (in order) make them, so no label is without its status change and no status
  change without its label.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from medverify.kb import KnowledgeBase
from medverify.records import Claim, Document
from medverify.review import ReviewItem, review_item_id
from medverify.store.access import KeyStore, Role
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore
from medverify.testing import FakeChatServer
from medverify.testing.faults import cli_env, kill_points
from medverify.testing.service import ServiceProcess, wait_until

SEED = 16
ITEMS = 40  # the first half settled by one label, the second half by two (or three)
REVIEWERS = 3
KILLS = 2
LABELS = ("FACT", "HALLUCINATION")
DOWN_WAIT_S = 60.0  # how long a reviewer waits for the server to come back

pytestmark = pytest.mark.timeout(180)


@dataclass(frozen=True)
class Sent:
    """One label request and what came of it."""

    item_id: str
    reviewer: str  # key id
    label: str
    note: str  # unique per request: finds its row
    status: int | None  # HTTP status; None: the request died with its connection
    label_id: int | None = None  # from a 2xx answer
    role: str | None = None


class Reviewers:
    """The reviewer threads and the bookkeeping the kills need."""

    def __init__(self, url: str, keys: dict[str, str], item_ids: list[str]) -> None:
        self.url, self.keys, self.item_ids = url, keys, item_ids
        self.lock = threading.Lock()
        self.sent: list[Sent] = []
        self.in_flight = 0
        self.ok = 0
        self.errors: list[str] = []
        self.up = threading.Event()  # cleared from a kill until the test saw the restart
        self.up.set()

    def run(self, reviewer: str, secret: str, seed: int) -> None:
        rng = random.Random(seed)
        order = list(self.item_ids)
        rng.shuffle(order)
        headers = {"Authorization": f"Bearer {secret}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=30.0) as http:
            for item_id in order:
                label = rng.choice(LABELS)
                note = f"{reviewer}:{item_id}:{uuid.UUID(int=rng.getrandbits(128))}"
                try:
                    sent = self._send(http, item_id, reviewer, label, note)
                except Exception as exc:  # pragma: no cover - reported by the test
                    with self.lock:
                        self.errors.append(f"{reviewer} {item_id}: {exc!r}")
                    return
                with self.lock:
                    self.sent.append(sent)
                    self.ok += sent.status is not None and 200 <= sent.status < 300

    def _send(self, http: httpx.Client, item_id: str, reviewer: str, label: str,
              note: str) -> Sent:
        deadline = time.monotonic() + DOWN_WAIT_S
        while True:
            if not self.up.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError("the server did not come back")
            with self.lock:
                self.in_flight += 1
            try:
                response = http.post(f"/v1/review/items/{item_id}/labels",
                                     json={"label": label, "note": note})
            except httpx.ConnectError:  # never reached the server: send it again
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
                continue
            except httpx.TransportError:  # died with the connection: written or not
                return Sent(item_id, reviewer, label, note, None)
            finally:
                with self.lock:
                    self.in_flight -= 1
            if response.status_code == 200:
                own = [x for x in response.json()["labels"] if x["reviewer"] == reviewer]
                assert len(own) == 1, response.text
                return Sent(item_id, reviewer, label, note, 200, own[0]["id"], own[0]["role"])
            if response.status_code != 409:
                raise AssertionError(f"{response.status_code}: {response.text}")
            return Sent(item_id, reviewer, label, note, 409)


def _items(n: int) -> list[ReviewItem]:
    now = datetime.now(UTC)
    return [ReviewItem(
        id=review_item_id("run-kill", f"a-{i}", f"c{i}"), run_id="run-kill",
        answer_id=f"a-{i}", question="What should I know about metformin?",
        answer_text=f"Metformin claim number {i}.",
        claim=Claim(id=f"c{i}", text=f"Metformin claim number {i}."),
        category="COVERAGE_GAP", priority=float(i % 7), labels_needed=1 if i < n // 2 else 2,
        created_at=now) for i in range(n)]


def _expected(needed: int, labels: list[tuple[str, str]]) -> tuple[str, str | None]:
    """(status, final label) that ``labels`` ((role, label), in order) make, asserting
    each label took the slot it had to take."""
    status, final = "open", None
    for position, (role, label) in enumerate(labels):
        assert status != "closed", f"a label after closing: {labels}"
        if position == 0:
            assert role == "first", labels
            status, final = ("closed", label) if needed == 1 else ("needs_second", None)
        elif position == 1:
            assert role == "second" and needed == 2, labels
            status, final = ("closed", label) if label == labels[0][1] else (
                "adjudication", None)
        else:
            assert position == 2 and role == "adjudication", labels
            status, final = "closed", label
    return status, final


def test_sigkill_while_labelling_loses_no_submitted_label(tmp_path: Path) -> None:
    kb, store, home = tmp_path / "kb", tmp_path / "runs.db", tmp_path / "home"
    with KnowledgeBase.create(kb, embedder="hash") as base:
        base.ingest([Document(doc_id="metformin", title="Metformin",
                              text="Metformin is a first-line medicine for type 2 diabetes.")])
    items = _items(ITEMS)
    with RunStore(store) as runs:
        made = [KeyStore(runs).create(f"reviewer {i}", Role.REVIEWER) for i in range(REVIEWERS)]
        assert ReviewStore(runs).add_items(items) == ITEMS
    keys = {key.key.id: key.secret for key in made}
    needed = {item.id: item.labels_needed for item in items}
    # 60 to 80 labels are answered 2xx in all: kill after between 6 and 29 of them
    points = kill_points(SEED, KILLS, 0.1 * ITEMS * 1.5, 0.5 * ITEMS * 1.5)
    rng = random.Random(SEED + 1)

    with FakeChatServer("unused") as fake:
        env = cli_env(home, MEDVERIFY_DECOMPOSER="rules",
                      MEDVERIFY_SERVICE__RATE_PER_MINUTE="1000000",
                      MEDVERIFY_SERVICE__RATE_BURST="1000000")
        server = ServiceProcess(kb=kb, store=store, home=home, env=env, workers=2,
                                log=tmp_path / "serve.log",
                                args=["-m", f"openai-compatible:unused@{fake.base_url}"])
        server.start()
        reviewers = Reviewers(server.url, keys, [item.id for item in items])
        threads = [threading.Thread(target=reviewers.run, args=(rid, secret, SEED * 10 + n),
                                    daemon=True)
                   for n, (rid, secret) in enumerate(keys.items())]
        in_flight_at_kill: list[int] = []
        try:
            for thread in threads:
                thread.start()
            for point in points:
                assert wait_until(lambda p=point: reviewers.ok >= p, 60.0), reviewers.ok
                assert wait_until(lambda: reviewers.in_flight > 0, 10.0, 0.001)
                time.sleep(rng.uniform(0.0, 0.01))
                in_flight_at_kill.append(reviewers.in_flight)
                server.kill()
                reviewers.up.clear()  # no request reaches the new server before the test
                server.start()  # the same store and port; the reviewers carry on
                reviewers.up.set()
            for thread in threads:
                thread.join(90.0)
            assert not any(thread.is_alive() for thread in threads), "a reviewer hung"
        finally:
            server.kill()
    assert reviewers.errors == [], reviewers.errors

    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT id, item_id, reviewer, role, label, note FROM review_labels"
                          " ORDER BY id").fetchall()
        state = {r[0]: (r[1], r[2], r[3]) for r in db.execute(
            "SELECT id, status, final_label, closed_at FROM review_items")}
    by_note = {row[5]: row for row in rows}
    assert len(by_note) == len(rows), "a request's label was written twice"

    answered = [s for s in reviewers.sent if s.status == 200]
    unsure = [s for s in reviewers.sent if s.status is None]
    for sent in answered:  # there exactly once, as answered
        row = by_note.get(sent.note)
        assert row is not None, f"label lost: {sent}"
        assert (row[0], row[1], row[2], row[3], row[4]) == (
            sent.label_id, sent.item_id, sent.reviewer, sent.role, sent.label), sent
    for sent in unsure:  # there whole, or absent
        row = by_note.get(sent.note)
        if row is not None:
            assert (row[1], row[2], row[4]) == (sent.item_id, sent.reviewer, sent.label)
    notes = {s.note for s in reviewers.sent if s.status is not None and s.status != 200}
    assert notes.isdisjoint(by_note), "a refused (409) label was written"
    assert set(by_note) <= {s.note for s in reviewers.sent}

    labels_of: dict[str, list[tuple[str, str, str]]] = {}
    for _, item_id, reviewer, role, label, _ in rows:
        labels_of.setdefault(item_id, []).append((reviewer, role, label))
    for item_id, slots in needed.items():
        given = labels_of.get(item_id, [])
        assert len(given) <= (1 if slots == 1 else 3), (item_id, given)
        assert len({r for r, _, _ in given}) == len(given), ("a reviewer twice", given)
        assert len({role for _, role, _ in given}) == len(given), ("a slot twice", given)
        status, final = _expected(slots, [(role, label) for _, role, label in given])
        got_status, got_final, closed_at = state[item_id]
        assert (got_status, got_final) == (status, final), (item_id, given, state[item_id])
        assert (closed_at is not None) == (status == "closed"), (item_id, state[item_id])

    closed = sum(s == "closed" for s, _, _ in state.values())
    assert all(n > 0 for n in in_flight_at_kill), in_flight_at_kill
    assert len(answered) >= points[-1]
    print(f"\nFAULTS review kill: points {points}, in flight at kill {in_flight_at_kill}, "
          f"answered {len(answered)}, unsure {len(unsure)} "
          f"({sum(s.note in by_note for s in unsure)} written), labels {len(rows)}, "
          f"closed {closed}/{ITEMS}")
