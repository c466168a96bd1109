"""The whole clinical loop in a real browser with the real built-in judge (issue 30's "done
when"): a service checks an answer with the shipped verifier; a JUDGMENT_ERROR claim and a
COVERAGE_GAP claim are escalated; a reviewer labels both in Chromium with corrections and
sources; checked again, both come back as the reviewer's decision with its provenance,
neither is queued again, and an unrelated claim keeps its verdict and its passages.

Marked ``browser`` (``make test-browser``); skipped without Playwright or Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore
from medverify.testing.service import ServiceThread

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("playwright.sync_api",
                    reason="Playwright is not installed (pip install playwright: the dev extra)")

pytestmark = pytest.mark.browser

MIXED = "Statins lower LDL cholesterol in adults."
GAP = "Vitamin C cures the common cold."
UNRELATED = "Metformin is a first-line medicine for type 2 diabetes."
ANSWER = {"question": "What do these medicines do?", "text": f"{MIXED} {GAP} {UNRELATED}"}
DOCS = [
    Document(doc_id="statin-trials", title="Statin trials",
             text="Statin therapy reduced LDL cholesterol by about a third in adults."),
    Document(doc_id="statin-letter", title="A letter on statins",
             text="Contrary to popular belief, statins have no effect on LDL cholesterol in "
                  "adults."),
    Document(doc_id="metformin", title="Metformin",
             text="Metformin is a first-line medicine for type 2 diabetes. The usual starting "
                  "dose is 500 mg once or twice daily with meals."),
]
LABELS = {  # claim -> (key, correction, source)
    MIXED: ("1", "Statins lower LDL cholesterol in adults; the letter that says otherwise "
                 "is not evidence.", "https://medlineplus.gov/statins.html"),
    GAP: ("2", "Vitamin C does not cure the common cold; taken every day it may shorten "
               "colds slightly.", "https://ods.od.nih.gov/factsheets/VitaminC-Consumer/"),
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest(DOCS)
    with RunStore(tmp_path / "runs.db") as store:
        keys = KeyStore(store)
        made = {r: keys.create(f"{r.value} key", r) for r in Role}
    # the built-in judge (no model), calibrated on SciFact: the family in which a
    # contradiction can be confident, so that two strong passages make a JUDGMENT_ERROR
    config = Config(kb=tmp_path / "kb", store=tmp_path / "runs.db",
                    cache_path=tmp_path / "cache.db", decomposer="rules",
                    retrieval={"mode": "lexical", "top_k": 3},
                    judge_settings={"calibration_family": "scifact"},
                    # every claim of the one answer is queued (no escalation budget)
                    arbitration={"coverage_gap": "ESCALATE", "escalation_budget": 1.0},
                    service={"job_poll_s": 0.05})
    with ServiceThread(config) as service:
        yield {"url": service.url, "secrets": {r: m.secret for r, m in made.items()}}


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    opened = context.new_page()
    opened.set_default_timeout(20_000)
    yield opened
    context.close()


def _api(server: dict[str, Any], method: str, path: str, role: Role = Role.CLIENT,
         **kwargs: Any) -> Any:
    response = httpx.request(method, server["url"] + path, timeout=60.0, headers={
        "Authorization": f"Bearer {server['secrets'][role]}"}, **kwargs)
    assert response.status_code < 300, response.text
    return response.json()


def _check(server: dict[str, Any]) -> dict[str, dict[str, Any]]:
    report = _api(server, "POST", "/v1/check?detail=full", json=ANSWER)
    return {r["claim"]["text"]: r for r in report["results"]}


def _label_in_browser(page: Any, server: dict[str, Any]) -> list[str]:
    page.goto(server["url"] + "/review")
    page.fill("#key", server["secrets"][Role.REVIEWER])
    with page.expect_navigation():
        page.click("#login")
    assert page.locator("tr.item").count() == 2
    page.click("tr.item a")
    seen = []
    for _ in range(2):
        claim = page.inner_text("#claim").strip()
        seen.append(claim)
        key, correction, source = LABELS[claim]
        page.keyboard.press(key)
        page.fill("#correction", correction)
        page.fill("#source_url", source)
        with page.expect_navigation():
            page.click("#submit")
        assert "Saved your label" in page.inner_text("[role=status]")
    assert page.locator("tr.item").count() == 0
    return seen


def test_the_whole_loop_with_the_built_in_judge(page: Any, server: dict[str, Any]) -> None:
    before = _check(server)
    assert before[MIXED]["category"] == "JUDGMENT_ERROR", before[MIXED]
    assert before[GAP]["category"] == "COVERAGE_GAP"
    assert before[UNRELATED]["category"] == "FACT"
    assert {c: r["arbitration"]["decision"] for c, r in before.items()} == {
        MIXED: "ESCALATE", GAP: "ESCALATE", UNRELATED: "ACCEPT"}
    assert sorted(_label_in_browser(page, server)) == sorted(LABELS)

    after = _check(server)
    for claim, category, decision in ((MIXED, "FACT", "ACCEPT"),
                                      (GAP, "HALLUCINATION", "FLAG")):
        result = after[claim]
        reviewed = result["arbitration"]["reviewed"]
        assert (result["category"], result["arbitration"]["decision"]) == (category, decision)
        assert result["arbitration"]["rule"] == "reviewed"
        assert reviewed["correction"] == LABELS[claim][1]
        assert reviewed["source_url"] == LABELS[claim][2]
        assert reviewed["reviewer"] and reviewed["reviewed_at"] and reviewed["item_id"]
    # the taught correction reaches the statin claim's evidence and outranks the letter:
    # the judge itself now says FACT (recorded as what it decided before the review applied)
    assert after[MIXED]["arbitration"]["reviewed"]["category_before"] == "FACT"
    assert any(p["source"] == "clinician-review" for p in after[MIXED]["passages"])
    # neither is queued again: nothing open, and the queue still holds the two closed items
    assert _api(server, "GET", "/v1/review/items?status=open", Role.REVIEWER) == []
    assert len(_api(server, "GET", "/v1/review/items?status=all", Role.REVIEWER)) == 2
    # the unrelated claim: same verdict, same passages (taught documents are searched apart)
    same = after[UNRELATED]
    assert (same["category"], same["arbitration"]["decision"], same["arbitration"]["rule"]) == (
        "FACT", "ACCEPT", before[UNRELATED]["arbitration"]["rule"])
    assert [p["id"] for p in same["passages"]] == [p["id"] for p in before[UNRELATED]["passages"]]
    # the queue page in the browser agrees: nothing left to review
    page.goto(server["url"] + "/review")
    assert page.locator("tr.item").count() == 0
