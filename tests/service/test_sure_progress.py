"""The review UI's progress page shows, per judge, the sure verdicts clinicians labelled and
overturned over the last 28 days, the judges below target marked (issue 42, item 3)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from medverify.config import Config, OpsSettings
from medverify.kb import KnowledgeBase
from medverify.records import Category, Document
from medverify.service.app import create_app
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore
from ops.test_overturns import _queue

FACT = Category.FACT


def _page(tmp_path: Path, config: Config, secret: str) -> str:
    with TestClient(create_app(config)) as client:
        page = client.get("/review/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        client.post("/review/login", data={"csrf": csrf.group(1), "key": secret})
        return client.get("/review/progress").text


def test_the_progress_page_shows_sure_verdicts_overturned(tmp_path: Path) -> None:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="d", title="D", text="Metformin is a medicine.")])
    now = datetime.now(UTC)
    with RunStore(tmp_path / "runs.db") as store:
        secret = KeyStore(store).create("reviewer", Role.REVIEWER).secret
        empty = _page(tmp_path, Config(kb=tmp_path / "kb", store=tmp_path / "runs.db"), secret)
        _queue(store, "builtin", [(FACT, True, "audit", "FACT")] +
               [(FACT, True, "audit", "HALLUCINATION")] * 2, now - timedelta(days=1))
        _queue(store, "<b>llm</b>", [(FACT, True, "fact_high_risk", "FACT")],
               now - timedelta(days=2))
    assert "No sure verdict labelled in the last 28 days" in empty
    config = Config(kb=tmp_path / "kb", store=tmp_path / "runs.db",
                    ops=OpsSettings(min_claims=3))
    html = _page(tmp_path, config, secret)
    table = html.split('id="sure-verdicts"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr( class=\"drifted\")?><td><code>(.*?)</code></td>(.*?)</tr>", table,
                      re.S)
    assert [(marked, judge) for marked, judge, _ in rows] == [
        ("", "&lt;b&gt;llm&lt;/b&gt;"), (' class="drifted"', "builtin")]
    cells = re.findall(r"<td>(.*?)</td>", rows[1][2])
    assert cells[:3] == ["3", "2", "33% ▼"] and cells[4] == "2 of 3"
    assert re.findall(r"<td>(.*?)</td>", rows[0][2])[4] == "0 of 0"
