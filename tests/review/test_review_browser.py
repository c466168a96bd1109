"""The review UI in a real browser: Playwright drives Debian's Chromium against the real
server (uvicorn on a loopback port, a ``fake:`` model as the judge). Marked ``browser``:
run with ``pytest -m browser`` (``make test-browser``); skipped without Playwright or
Chromium (``apt-get install chromium``; see docs/review.md)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.records import Claim, Document, Passage, Span
from medverify.review import ReviewItem
from medverify.store.access import KeyStore, Role
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import Decision, scripted_judge
from medverify.testing.service import ServiceThread

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("playwright.sync_api",
                    reason="Playwright is not installed (pip install playwright: the dev extra)")

pytestmark = pytest.mark.browser

ANSWER = {"question": "How are these conditions treated?",
          "text": "Lisinopril lowers blood pressure. Statins lower cholesterol. "
                  "Insulin pens are kept in a refrigerator."}
CORRECTED = "Statins lower cholesterol"
CORRECTION = ("Statins lower cholesterol, LDL cholesterol above all; they are the first "
              "medicine for most people with raised cardiovascular risk.")
SOURCE = "https://guidelines.example.org/lipids#statins"
SCRIPT = "<script>window.__pwned=1</script>"
IMG = '<img src=x onerror="window.__pwned=2,alert(1)">'
EVIL = {"text": f"Aspirin {SCRIPT} eases pain. Ibuprofen {IMG} reduces fever."}


def in_the_kb(claim: str, passages: dict[str, str]) -> Decision:
    """Supported when a passage holds the claim's text; never contradicted: a claim the KB
    does not hold is a COVERAGE_GAP (escalated, with the policy below)."""
    text = claim.casefold().strip().rstrip(".")
    return any(text in p.casefold() for p in passages.values()), False


@pytest.fixture
def server(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="metformin", title="Metformin",
                            text="Metformin is a first-line medicine for type 2 diabetes.")])
    register_fake("review-browser", ScriptedProvider(scripted_judge(in_the_kb)))
    with RunStore(tmp_path / "runs.db") as store:
        keys = KeyStore(store)
        made = {r: keys.create(f"{r.value} key", r) for r in Role}
    config = Config(kb=tmp_path / "kb", store=tmp_path / "runs.db",
                    cache_path=tmp_path / "cache.db", model="fake:review-browser",
                    decomposer="rules",
                    # every claim of the one answer is queued (no escalation budget)
                    arbitration={"coverage_gap": "ESCALATE", "escalation_budget": 1.0},
                    service={"job_poll_s": 0.05})
    try:
        with ServiceThread(config) as service:
            yield {"url": service.url, "secrets": {r: m.secret for r, m in made.items()},
                   "ids": {r: m.key.id for r, m in made.items()}}
    finally:
        unregister_fake("review-browser")


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    dialogs: list[str] = []
    opened.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    opened.dialogs = dialogs
    yield opened
    context.close()


def _api(server: dict[str, Any], method: str, path: str, role: Role = Role.CLIENT,
         **kwargs: Any) -> Any:
    response = httpx.request(method, server["url"] + path, timeout=30.0, headers={
        "Authorization": f"Bearer {server['secrets'][role]}"}, **kwargs)
    assert response.status_code < 300, response.text
    return response.json()


def _check(server: dict[str, Any], answer: dict[str, Any]) -> dict[str, str]:
    report = _api(server, "POST", "/v1/check", json=answer)
    return {r["claim"]["text"]: r["category"] for r in report["results"]}


def _login(page: Any, server: dict[str, Any], role: Role = Role.REVIEWER) -> Any:
    page.goto(server["url"] + "/review")
    assert page.url.startswith(server["url"] + "/review/login")
    page.fill("#key", server["secrets"][role])
    with page.expect_navigation() as navigation:
        page.click("#login")
    return navigation.value


def test_a_reviewer_labels_three_claims_and_the_correction_teaches_the_kb(
        page: Any, server: dict[str, Any]) -> None:
    before = _check(server, ANSWER)
    assert len(before) == 3 and set(before.values()) == {"COVERAGE_GAP"}, before
    _login(page, server)
    assert page.url == server["url"] + "/review"
    assert page.locator("tr.item").count() == 3
    page.click("tr.item a")
    given: dict[str, str] = {}  # claim -> the label the reviewer gave
    for n in range(3):
        claim = page.inner_text("#claim")
        given[claim.strip()] = ("COVERAGE_GAP" if claim.startswith(CORRECTED)
                                else "HALLUCINATION" if n == 0 else "CANNOT_TELL")
        assert page.locator("mark.claim").inner_text() in ANSWER["text"]
        assert "Keyboard" in page.inner_text("#shortcuts")
        if claim.startswith(CORRECTED):  # a coverage gap: the reviewer fills it, with a source
            page.keyboard.press("4")
            page.fill("#correction", CORRECTION)
            page.fill("#source_url", SOURCE)
            page.fill("#note", "KB lacks the lipid guideline")
            with page.expect_navigation():
                page.click("#submit")
        else:  # the keyboard alone: 2 = HALLUCINATION, 5 = CANNOT_TELL, Enter saves
            page.keyboard.press("2" if n == 0 else "5")
            assert page.locator("input[name=label]:checked").count() == 1
            with page.expect_navigation():
                page.keyboard.press("Enter")
        assert "Saved your label" in page.inner_text("[role=status]")
    assert "No items match" in page.inner_text("main")
    assert page.locator("tr.item").count() == 0

    # checked again: each labelled claim is settled by its label (CANNOT_TELL settles
    # nothing: the judge's COVERAGE_GAP again); the correction taught the KB, so a claim
    # that restates it is now FACT on the taught document
    after = _check(server, ANSWER)
    assert after == {c: ("COVERAGE_GAP" if label == "CANNOT_TELL" else label)
                     for c, label in given.items()}, (after, given)
    restated = _check(server, {"text": "Statins lower cholesterol, LDL cholesterol above all."})
    assert list(restated.values()) == ["FACT"], restated
    changes = _api(server, "GET", "/v1/review/kb-changes", Role.REVIEWER)
    assert [(c["text"], c["source_url"]) for c in changes] == [(CORRECTION, SOURCE)]

    page.click("text=Progress")
    assert page.inner_text("#items-reviewed") == "3" and page.inner_text("#kb-added") == "1"
    events = _api(server, "GET", "/v1/audit-log", Role.ADMIN)
    labels = [e for e in events if e["action"] == "POST /review/items/{item_id}/label"]
    assert len(labels) == 3
    assert {(e["key_id"], e["status"]) for e in labels} == {(server["ids"][Role.REVIEWER], 303)}


def test_script_and_img_in_claims_render_as_text_and_nothing_runs(
        page: Any, server: dict[str, Any]) -> None:
    claims = _check(server, EVIL)
    assert any("<script>" in c for c in claims) and any("onerror" in c for c in claims)
    _login(page, server)
    queue = page.inner_text("#queue")  # the claims (the decomposer drops the "__")
    assert "<script>window.pwned=1</script>" in queue and "<img src=x onerror=" in queue
    assert page.locator("#queue script, #queue img").count() == 0
    links = [a.get_attribute("href") for a in page.locator("tr.item a").all()]
    assert len(links) == 2
    for href in links:
        page.goto(server["url"] + href)
        assert page.inner_text("#answer") == EVIL["text"]
        assert page.locator("mark.claim").inner_text() in EVIL["text"]
        assert page.locator("#answer script, #answer img, #claim script, #claim img").count() == 0
        assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.dialogs == []


def test_a_client_key_cannot_log_in(page: Any, server: dict[str, Any]) -> None:
    response = _login(page, server, Role.CLIENT)
    assert response.status == 403
    assert "Not a reviewer key" in page.inner_text("h1")
    assert "reviewer or admin" in page.inner_text("#message")
    assert not [c for c in page.context.cookies() if c["name"] == "mv_session"]
    page.goto(server["url"] + "/review")
    assert page.url.startswith(server["url"] + "/review/login")


def test_a_form_without_its_csrf_token_is_refused_and_nothing_is_written(
        page: Any, server: dict[str, Any]) -> None:
    _check(server, {"text": "Statins lower cholesterol."})
    _login(page, server)
    [cookie] = [c for c in page.context.cookies() if c["name"] == "mv_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/review"
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it
    page.click("tr.item a")
    item_url = page.url
    item_id = item_url.rsplit("/", 1)[1]
    token = page.get_attribute("#label-form input[name=csrf]", "value")

    # the form replayed without its token
    page.evaluate("document.querySelector('#label-form input[name=csrf]').remove()")
    page.keyboard.press("1")
    with page.expect_navigation() as navigation:
        page.click("#submit")
    assert navigation.value.status == 403 and "Form refused" in page.inner_text("h1")
    # a wrong token, posted with the session's cookie
    replay = page.request.post(item_url + "/label", form={"label": "FACT", "csrf": "x" + token},
                               max_redirects=0)
    assert replay.status == 403
    # another site's page posting the right token: SameSite=Strict keeps the cookie home
    page.goto("about:blank")
    page.set_content(f'<form method="post" action="{item_url}/label">'
                     f'<input name="label" value="FACT"><input name="csrf" value="{token}">'
                     '<button id="go">go</button></form>')
    with page.expect_navigation() as navigation:
        page.click("#go")
    assert navigation.value.status == 403 and "Not logged in" in page.inner_text("h1")

    item = _api(server, "GET", f"/v1/review/items/{item_id}", Role.ADMIN)
    assert item["status"] == "open" and item["labels"] == []
    page.goto(item_url)  # the real form, with its token, still works
    page.keyboard.press("1")
    with page.expect_navigation() as navigation:
        page.keyboard.press("Enter")
    assert navigation.value.status == 200
    item = _api(server, "GET", f"/v1/review/items/{item_id}", Role.ADMIN)
    assert item["status"] == "closed" and [x["label"] for x in item["labels"]] == ["FACT"]


SENTENCES = ("Metformin is a first-line medicine for type 2 diabetes in adults. ",
             "It lowers blood glucose by reducing hepatic glucose production. ",
             "Gastrointestinal side effects are common at the start and usually settle. ",
             "The dose is increased slowly to the usual maximum of 2 g a day. ",
             "Kidney function is checked before starting and at least once a year. ")
QUOTE = "Metformin is a first-line medicine for type 2 diabetes in adults."
HOSTILE = "<script>window.__pwned=3</script></mark><b>x</b> "


def _passage_text(n: int) -> str:
    """About 2,200 characters (a 512-token chunk), the deciding sentence in the middle."""
    body = "".join(SENTENCES[(n + i) % len(SENTENCES)] for i in range(34))
    return HOSTILE + body if n == 6 else body


def _clinical_item() -> ReviewItem:
    """A realistic escalated claim: seven chunk-sized passages (the default top_k), the
    built-in judge's maxima and thresholds, each passage's own probabilities."""
    passages = [Passage(id=f"p{n}", doc_id=f"d{n}", title=f"Guideline section {n}",
                        url=f"https://guidelines.example.org/diabetes/{n}",
                        text=_passage_text(n)) for n in range(7)]
    claim = "Metformin is the first medicine for type 2 diabetes."
    answer = f"For most adults, {claim} Lifestyle changes come first."
    at = answer.index(claim)
    return ReviewItem(
        id="rv-clinical", answer_id="a1", question="What is the first medicine?",
        answer_text=answer, claim=Claim(id="c1", text=claim,
                                        span=Span(start=at, end=at + len(claim))),
        passages=passages, category="FACT",
        probabilities={"SUPPORTED": 0.91, "CONTRADICTED": 0.08, "NOT_ENOUGH_INFO": 0.6,
                       "threshold_support": 0.81, "threshold_contradict": 0.4},
        passage_probabilities={p.id: {"SUPPORTED": round(0.91 - 0.1 * i, 2),
                                      "CONTRADICTED": round(0.01 * (i + 1), 2),
                                      "NOT_ENOUGH_INFO": round(0.08 + 0.09 * i, 2)}
                               for i, p in enumerate(passages)},
        evidence_passage_id="p0", evidence_quote=QUOTE,
        judge_reason="supported by p0", risk=0.35,
        arbitration={"decision": "ESCALATE", "rule": "not_sure", "policy": "arbitration/v1",
                     "inputs": {"confident": False, "not_sure": "a number differs"}},
        priority=0.7, topic="diabetes", created_at=datetime.now(UTC))


def _open_clinical_item(page: Any, server: dict[str, Any], tmp_path: Path) -> str:
    with RunStore(tmp_path / "runs.db") as store:
        ReviewStore(store).add_items([_clinical_item()])
    page.set_viewport_size({"width": 1280, "height": 800})
    _login(page, server)
    url = server["url"] + "/review/items/rv-clinical"
    page.goto(url)
    return url


def test_the_item_page_puts_the_decision_and_the_form_in_the_first_screen(
        page: Any, server: dict[str, Any], tmp_path: Path) -> None:
    _open_clinical_item(page, server, tmp_path)
    height = page.evaluate("document.body.scrollHeight")
    print(f"item page height at 1280x800, passages collapsed: {height} px")
    shot = page.screenshot(path=str(tmp_path / "item-first-screen.png"))
    assert isinstance(shot, bytes) and shot[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "item-first-screen.png").stat().st_size == len(shot)
    for selector in ("#claim", "#decision", "#quote mark.quote", "#label-form", "#submit"):
        box = page.locator(selector).bounding_box()
        assert box is not None and box["y"] >= 0, selector
        assert box["y"] + box["height"] <= 800, (selector, box)
    assert QUOTE in page.inner_text("#quote") and "Guideline section 0" in page.inner_text(
        "#quote")
    assert "ESCALATE" in page.inner_text("#decision") and "not sure" in page.inner_text(
        "#decision")
    passages = page.locator("details.passage")
    assert passages.count() == 7
    assert page.evaluate("[...document.querySelectorAll('details.passage')]"
                         ".every(d => !d.open)")
    assert not page.locator("details.passage mark.quote").is_visible()
    assert not any(t.is_visible() for t in page.locator("details.passage .text").all())
    summary = page.inner_text("details.passage[data-passage=p0] summary")
    assert "this passage supports the claim: 0.91; contradicts: 0.01" in summary
    page.click("details.passage[data-passage=p0] summary")
    assert page.locator("details.passage[data-passage=p0] mark.quote").inner_text() == QUOTE
    page.click("details.passage[data-passage=p6] summary")
    assert page.inner_text("details.passage[data-passage=p6] .text").startswith(HOSTILE)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert "support ≥ 0.81, contradiction ≥ 0.40" in page.inner_text("#how-decided")
    # the keyboard flow: 1 chooses FACT, c jumps to the correction, Esc leaves it, Enter saves
    page.keyboard.press("1")
    page.keyboard.press("c")
    assert page.evaluate("document.activeElement.id") == "correction"
    page.keyboard.press("Escape")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "Saved your label" in page.inner_text("[role=status]")
