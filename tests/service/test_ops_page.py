"""The review UI's progress page shows the verdicts' drift of the last 7 days (issue 34):
each day's ERROR, ESCALATE, HALLUCINATION and NOT_SURE shares, with the drifted ones marked."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.records import Answer, Arbitration, Claim, ClaimResult, Decision, Document
from medverify.service.app import create_app
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore


def _day(store: RunStore, when: datetime, errors: int, n: int = 50) -> None:
    results = []
    for i in range(n):
        claim = Claim(id=f"c{i}", text=f"claim {i}")
        result = ClaimResult.failed(claim, "judge down") if i < errors else ClaimResult(
            claim=claim, category="FACT", confident=True)
        decision = Decision.ESCALATE if i < errors else Decision.ACCEPT
        results.append(result.decided(Arbitration(decision=decision, rule="t", policy="p")))
    run_id = store.start_run(kind="check", config={}, models={}, prompt_versions={},
                             kb_snapshot=None)
    store.save_answer(run_id, 0, Answer(text="x"), results)
    store._db.execute("UPDATE runs SET created_at = ? WHERE id = ?",
                      (when.isoformat(timespec="seconds"), run_id))


def test_the_progress_page_marks_the_drifted_day(tmp_path: Path) -> None:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="d", title="D", text="Metformin is a medicine.")])
    now = datetime.now(UTC)
    with RunStore(tmp_path / "runs.db") as store:
        for back in range(1, 9):
            _day(store, now - timedelta(days=back), errors=1)
        _day(store, now - timedelta(seconds=5), errors=20)
        secret = KeyStore(store).create("reviewer", Role.REVIEWER).secret
    config = Config(kb=tmp_path / "kb", store=tmp_path / "runs.db")
    with TestClient(create_app(config)) as client:
        page = client.get("/review/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        client.post("/review/login", data={"csrf": csrf.group(1), "key": secret})
        html = client.get("/review/progress").text
    table = html.split('id="drift"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>(\d{4}-\d\d-\d\d)</td><td>(\d+)</td>(.*?)</tr>", table, re.S)
    assert len(rows) == 7  # today and the 6 days before, newest first
    today, claims, cells = rows[0]
    assert today == now.date().isoformat() and claims == "50"
    assert cells.count('class="drifted"') == 2 and "40% ▲" in cells
    assert "ERROR, ESCALATE" in cells
    assert all('class="drifted"' not in row[2] and row[1] == "50" for row in rows[1:])
