"""The review UI in process (FastAPI's test client): login and sessions, CSRF, escaping,
error pages, the form exception of the body guard. The same pages in a real browser are in
test_review_browser.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from medverify.config import ArbitrationPolicy, Config
from medverify.kb import KnowledgeBase
from medverify.records import (
    Analysis,
    Answer,
    CheckFinding,
    CheckKind,
    Claim,
    ClaimResult,
    Document,
    Passage,
    Report,
    Span,
    Verdict,
)
from medverify.report.metrics import compute_metrics
from medverify.review import ReviewItem, items_from_report
from medverify.service import item_page, ui
from medverify.service.app import create_app
from medverify.service.item_page import item_verdict
from medverify.store.access import AuditLog, KeyStore, Role, SessionStore
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge

EVIL_CLAIM = "Take <script>window.__pwned = 1</script> twice <img src=x onerror=alert(1)> daily."
ANSWER = "Metformin is first-line. " + EVIL_CLAIM + " See a doctor."


def _item(item_id: str, priority: float, claim: str = "Metformin is first-line.",
          answer: str = "Metformin is first-line.", **extra: Any) -> ReviewItem:
    start = answer.find(claim)
    span = Span(start=start, end=start + len(claim)) if start >= 0 else None
    fields: dict[str, Any] = {
        "id": item_id, "run_id": None, "answer_id": "a1", "question": "How?",
        "answer_text": answer, "claim": Claim(id="c1", text=claim, span=span),
        "passages": [Passage(id="p1", doc_id="d1", text="Metformin is a first-line medicine.",
                             url="https://example.org/metformin")],
        "category": "COVERAGE_GAP", "probabilities": {"NOT_ENOUGH_INFO": 0.9},
        "evidence_passage_id": "p1", "evidence_quote": "a first-line medicine",
        "judge_reason": "not in the passages", "risk": 0.8,
        "arbitration": {"decision": "ESCALATE", "rule": "coverage_gap_high_risk",
                        "policy": "arbitration/v1+00000000", "inputs": {"risk": 0.8}},
        "priority": priority, "topic": "diabetes", "created_at": datetime.now(UTC)}
    fields.update(extra)
    return ReviewItem(**fields)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="d1", text="Metformin is a first-line medicine.")])
    register_fake("review-ui", ScriptedProvider(scripted_judge(keyword_rule())))
    with RunStore(tmp_path / "runs.db") as store:
        keys = KeyStore(store)
        made = {r: keys.create(f"{r.value} key", r) for r in Role}
        ReviewStore(store).add_items([
            _item("rv-low", 0.2), _item("rv-high", 0.9, topic="cardiology"),
            _item("rv-evil", 0.5, claim=EVIL_CLAIM, answer=ANSWER, judge_reason=EVIL_CLAIM,
                  passages=[Passage(id="p9", doc_id="d9", text="<b>bold</b> " + EVIL_CLAIM,
                                    url="javascript:alert(1)", title="<i>t</i>")]),
        ])
    config = Config(kb=tmp_path / "kb", store=tmp_path / "runs.db",
                    cache_path=tmp_path / "cache.db", model="fake:review-ui",
                    decomposer="rules", service={"max_body_bytes": 4096})
    yield {"tmp": tmp_path, "secrets": {r: m.secret for r, m in made.items()},
           "ids": {r: m.key.id for r, m in made.items()}, "config": config}
    unregister_fake("review-ui")


@pytest.fixture
def client(setup: dict[str, Any]) -> Iterator[TestClient]:
    with TestClient(create_app(setup["config"], run_jobs=False)) as c:
        yield c


def _token(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def _login(client: TestClient, secret: str) -> Any:
    page = client.get("/review/login")
    assert page.status_code == 200
    return client.post("/review/login", data={"csrf": _token(page.text), "key": secret},
                       follow_redirects=False)


def _logged_in(client: TestClient, setup: dict[str, Any], role: Role = Role.REVIEWER) -> str:
    response = _login(client, setup["secrets"][role])
    assert response.status_code == 303, response.text
    return _token(client.get("/review").text)


def _labels(setup: dict[str, Any]) -> list[Any]:
    with RunStore(setup["tmp"] / "runs.db") as store:
        return ReviewStore(store).labels()


def test_pages_need_a_session_and_login_sets_a_strict_http_only_cookie(
        client: TestClient, setup: dict[str, Any]) -> None:
    first = client.get("/review/items/rv-high", follow_redirects=False)
    assert first.status_code == 303
    assert first.headers["location"] == "/review/login?next=/review/items/rv-high"
    page = client.get("/review/login")
    assert "mv_login=" in page.headers["set-cookie"]
    response = client.post("/review/login", data={
        "csrf": _token(page.text), "key": setup["secrets"][Role.REVIEWER],
        "next": "/review/items/rv-high"}, follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/review/items/rv-high"
    cookie = next(c for c in response.headers.get_list("set-cookie")
                  if c.startswith("mv_session="))
    flags = {part.strip().lower() for part in cookie.split(";")}
    assert {"httponly", "samesite=strict", "path=/review"} <= flags
    session_id = cookie.split(";")[0].split("=", 1)[1]
    with RunStore(setup["tmp"] / "runs.db") as store:
        session = SessionStore(store).get(session_id)
        assert session is not None and session.key.id == setup["ids"][Role.REVIEWER]
        rows = store._db.execute("SELECT id_sha256 FROM review_sessions").fetchall()
        assert session_id not in {r[0] for r in rows}  # stored hashed
    item = client.get("/review/items/rv-high")
    assert item.status_code == 200 and "Metformin is first-line." in item.text
    assert "script-src 'nonce-" in item.headers["content-security-policy"]
    assert item.headers["cache-control"] == "no-store"


def test_an_offsite_next_is_ignored(client: TestClient, setup: dict[str, Any]) -> None:
    page = client.get("/review/login")
    response = client.post("/review/login", data={
        "csrf": _token(page.text), "key": setup["secrets"][Role.ADMIN],
        "next": "//evil.example/review"}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/review"


def test_a_client_key_cannot_log_in(client: TestClient, setup: dict[str, Any]) -> None:
    response = _login(client, setup["secrets"][Role.CLIENT])
    assert response.status_code == 403
    assert "text/html" in response.headers["content-type"]
    assert "Not a reviewer key" in response.text and "reviewer or admin" in response.text
    assert "mv_session" not in response.headers.get("set-cookie", "")
    wrong = _login(client, "mvk_000000000000_" + "x" * 40)
    assert wrong.status_code == 401 and "unknown, wrong or revoked" in wrong.text
    with RunStore(setup["tmp"] / "runs.db") as store:
        assert store._db.execute("SELECT COUNT(*) FROM review_sessions").fetchone()[0] == 0
        refused = [e for e in AuditLog(store).list() if e.action == "POST /review/login"]
        assert [(e.key_id, e.status) for e in refused] == [
            (None, 401), (setup["ids"][Role.CLIENT], 403)]


def test_login_without_the_form_token_is_refused(client: TestClient,
                                                 setup: dict[str, Any]) -> None:
    client.get("/review/login")
    response = client.post("/review/login", data={"key": setup["secrets"][Role.REVIEWER]},
                           follow_redirects=False)
    assert response.status_code == 403 and "mv_session" not in response.headers.get(
        "set-cookie", "")


def test_queue_is_sorted_by_priority_and_filters(client: TestClient,
                                                 setup: dict[str, Any]) -> None:
    _logged_in(client, setup)
    html = client.get("/review").text
    order = re.findall(r'class="item" data-id="([^"]+)"', html)
    assert order == ["rv-high", "rv-evil", "rv-low"]
    assert re.findall(r'data-id="([^"]+)"', client.get(
        "/review?min_priority=0.4").text) == ["rv-high", "rv-evil"]
    assert re.findall(r'data-id="([^"]+)"', client.get(
        "/review?topic=cardiology").text) == ["rv-high"]
    assert "No items match" in client.get("/review?status=closed").text
    bad = client.get("/review?min_priority=lots")
    assert bad.status_code == 422 and "min_priority must be a number" in bad.text
    page = client.get("/review?page=first")
    assert page.status_code == 422 and "text/html" in page.headers["content-type"]


def test_a_label_without_or_with_a_wrong_csrf_token_writes_nothing(
        client: TestClient, setup: dict[str, Any]) -> None:
    token = _logged_in(client, setup)
    form = {"label": "FACT", "note": "replayed"}
    for data in (form, {**form, "csrf": "wrong" + token}, {**form, "csrf": ""}):
        response = client.post("/review/items/rv-high/label", data=data, follow_redirects=False)
        assert response.status_code == 403 and "security token" in response.text
    assert _labels(setup) == []
    response = client.post("/review/items/rv-high/label", data={**form, "csrf": token},
                           follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/review/items/rv-evil?done=rv-high"
    [label] = _labels(setup)
    assert (label.item_id, label.label, label.reviewer) == (
        "rv-high", "FACT", setup["ids"][Role.REVIEWER])
    with RunStore(setup["tmp"] / "runs.db") as store:
        posts = [(e.key_id, e.target, e.status) for e in AuditLog(store).list()
                 if e.action == "POST /review/items/{item_id}/label"]
    reviewer = setup["ids"][Role.REVIEWER]
    assert posts == [(reviewer, "rv-high", 303)] + [(reviewer, None, 403)] * 3


def test_another_sessions_token_is_refused(client: TestClient,
                                          setup: dict[str, Any]) -> None:
    admins = _logged_in(client, setup, Role.ADMIN)  # a live session, but not this one
    client.cookies.clear()
    _logged_in(client, setup)
    response = client.post("/review/items/rv-high/label",
                           data={"label": "FACT", "csrf": admins}, follow_redirects=False)
    assert response.status_code == 403
    assert _labels(setup) == []


def test_untrusted_text_is_escaped(client: TestClient, setup: dict[str, Any]) -> None:
    _logged_in(client, setup)
    for path in ("/review/items/rv-evil", "/review"):
        html = client.get(path).text
        assert "<script>window.__pwned" not in html and "<img src=x" not in html
        assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in html
    html = client.get("/review/items/rv-evil").text
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "&lt;b&gt;bold" in html
    assert 'href="javascript:' not in html and "javascript:alert(1)" in html  # as text only
    assert '<mark class="claim">Take &lt;script&gt;' in html  # the claim's span, marked
    assert html.count("<script") == 1  # only the page's own (nonce'd) script


def test_error_pages_and_nothing_half_written(client: TestClient,
                                              setup: dict[str, Any]) -> None:
    token = _logged_in(client, setup)
    missing = client.get("/review/items/rv-nope")
    assert missing.status_code == 404 and "text/html" in missing.headers["content-type"]
    assert "no review item" in missing.text
    posted = client.post("/review/items/rv-nope/label", data={"label": "FACT", "csrf": token})
    assert posted.status_code == 404
    for url in ("ftp://example.org/x", "javascript:alert(1)", "http://127.0.0.1/x",
                "https://exa mple.org"):
        bad = client.post("/review/items/rv-low/label", data={
            "label": "HALLUCINATION", "csrf": token, "correction": "x", "source_url": url})
        assert bad.status_code == 422 and "source" in bad.text.lower(), url
    no_label = client.post("/review/items/rv-low/label", data={"label": "MAYBE", "csrf": token})
    assert no_label.status_code == 422
    assert _labels(setup) == []
    ok = client.post("/review/items/rv-low/label", data={"label": "CANNOT_TELL", "csrf": token},
                     follow_redirects=False)
    assert ok.status_code == 303
    again = client.post("/review/items/rv-low/label", data={"label": "FACT", "csrf": token})
    assert again.status_code == 409 and "closed" in again.text
    assert len(_labels(setup)) == 1
    page = client.get("/review/items/rv-low")
    assert 'id="closed"' in page.text and 'id="label-form"' not in page.text


def test_logout_ends_the_session_and_a_revoked_key_ends_it_too(
        client: TestClient, setup: dict[str, Any]) -> None:
    token = _logged_in(client, setup)
    assert client.post("/review/logout", data={}).status_code == 403  # no token: refused
    out = client.post("/review/logout", data={"csrf": token}, follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"] == "/review/login"
    assert client.get("/review", follow_redirects=False).status_code == 303
    _logged_in(client, setup)
    with RunStore(setup["tmp"] / "runs.db") as store:
        KeyStore(store).revoke(setup["ids"][Role.REVIEWER])
    assert client.get("/review", follow_redirects=False).status_code == 303
    refused = client.post("/review/items/rv-high/label", data={"label": "FACT", "csrf": token})
    assert refused.status_code == 403 and _labels(setup) == []


def test_session_store_expiry_and_delete(tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.db") as store:
        key = KeyStore(store).create("r", Role.REVIEWER).key
        sessions = SessionStore(store)
        session_id, csrf = sessions.create(key.id)
        session = sessions.get(session_id)
        assert session is not None and session.csrf_token == csrf
        assert sessions.get("x" * 43) is None and sessions.get(None) is None
        assert SessionStore(store, ttl=timedelta(seconds=-1)).create(key.id)[0]
        expired = SessionStore(store, ttl=timedelta(seconds=-1))
        old, _ = expired.create(key.id)
        assert sessions.get(old) is None
        assert sessions.delete(session_id) and sessions.get(session_id) is None
        assert not sessions.delete(session_id)


def test_form_bodies_are_only_accepted_under_review(client: TestClient,
                                                    setup: dict[str, Any]) -> None:
    auth = {"Authorization": f"Bearer {setup['secrets'][Role.CLIENT]}"}
    refused = client.post("/v1/check", data={"text": "x"}, headers=auth)
    assert refused.status_code == 415
    token = _logged_in(client, setup)
    big = client.post("/review/items/rv-high/label",
                      data={"label": "FACT", "csrf": token, "note": "x" * 5000})
    assert big.status_code == 413
    assert _labels(setup) == []


def test_progress_page(client: TestClient, setup: dict[str, Any]) -> None:
    token = _logged_in(client, setup)
    client.post("/review/items/rv-high/label", data={"label": "FACT", "csrf": token})
    html = client.get("/review/progress")
    assert html.status_code == 200
    assert re.search(r'id="items-reviewed">1<', html.text)
    assert re.search(r'id="kb-added">0<', html.text)
    assert "Reviewer agreement" in html.text


# ---- verdicts that are not sure --------------------------------------------------------

REASON = "P(supported)=0.62, below the 0.81 needed " + EVIL_CLAIM


def _unsure_item() -> ReviewItem:
    """An escalated claim whose verdict is not sure, queued through the learning loop."""
    claim = Claim(id="c9", text="Metformin is first-line.")
    verdict = Verdict(claim_id="c9", factual=Analysis(holds=True),
                      counterfactual=Analysis(holds=False), confident=False, not_sure=REASON)
    result = ClaimResult.from_verdict(claim, [], verdict)
    report = Report(answer=Answer(id="a9", text="Metformin is first-line."), results=[result],
                    metrics=compute_metrics([result]), run_id="run9")
    [item] = items_from_report(report, policy=ArbitrationPolicy(not_sure="ESCALATE"))
    return item


def test_a_not_sure_verdict_shows_as_such_on_the_item_and_in_the_queue(
        client: TestClient, setup: dict[str, Any]) -> None:
    item = _unsure_item()
    assert item.arbitration["rule"] == "not_sure_clinical"  # a drug: a clinician should see it
    with RunStore(setup["tmp"] / "runs.db") as store:
        ReviewStore(store).add_items([item])
    _logged_in(client, setup)
    html = client.get(f"/review/items/{item.id}").text
    assert '<span class="badge FACT unsure-cat">FACT</span> <span class="unsure"' in html
    assert ('<strong>FACT, not sure:</strong> P(supported)=0.62, below the 0.81 needed Take '
            "&lt;script&gt;window.__pwned") in html
    inputs = html[html.index('id="inputs"'):]
    inputs = inputs[:inputs.index("</p>")]
    assert ">confident</span> no" in inputs and "P(supported)" not in inputs  # shown once
    assert html.count("<script") == 1 and "<img src=x" not in html
    queue = client.get("/review").text
    row = queue[queue.index(f'data-id="{item.id}"'):]
    row = row[: row.index("</tr>")]
    assert '<span class="unsure">not sure</span>' in row and "&lt;script&gt;" in row
    assert "<script" not in row
    # why it is there, in words, on both pages
    assert "the verdict is not sure and the claim states a drug" in row
    assert '<span id="why">the verdict is not sure and the claim states a drug</span>' in html
    sure = client.get("/review/items/rv-high").text  # recorded without an assessment
    assert 'class="unsure"' not in sure and 'id="not-sure"' not in sure


def test_the_item_page_lists_the_findings_an_item_carries() -> None:
    base = _unsure_item()
    finding = CheckFinding(kind=CheckKind.NUMBER, veto=True, passage_id="p1",
                           claim_says=EVIL_CLAIM, passage_says="every 10 years",
                           reason="the claim says " + EVIL_CLAIM)
    item = base.model_copy(update={"findings": [finding]})
    verdict = item_verdict(item)
    assert (verdict.confident, verdict.reason) == (False, REASON)
    assert verdict.findings == [(finding, "support not counted")]
    assert item_verdict(base).findings == []
    html = _render(item)
    findings = html[html.index('id="findings"'):]
    findings = findings[: findings.index("</ul>")]
    assert "<strong>number</strong> (support not counted): the claim says Take &lt;script&gt;" in (
        findings)
    assert "<script" not in findings and "<img" not in findings


def test_review_items_keep_their_verdicts_findings_through_the_store(
        setup: dict[str, Any]) -> None:
    finding = CheckFinding(kind=CheckKind.NUMBER, veto=True, passage_id="p1",
                           claim_says="every 2 years", passage_says="every 10 years",
                           reason="the claim says every 2 years; the passage says every 10 years")
    item = _unsure_item().model_copy(update={"id": "rv-findings", "findings": [finding]})
    with RunStore(setup["tmp"] / "runs.db") as store:
        queue = ReviewStore(store)
        queue.add_items([item])
        [stored] = [i for i in queue.list() if i.id == "rv-findings"]
    assert stored.findings == [finding]


# ---- the item page's layout: the first screen, then the details -------------------------

HOSTILE = "<script>window.__pwned=4</script></mark><b>x</b> "


def _render(item: ReviewItem) -> str:
    return ui._environment().get_template("item.html.j2").render(
        nonce="n", session=None, csrf="t", done=None, **item_page.item_context(item, None))


def _clinical(**extra: Any) -> ReviewItem:
    passages = [Passage(id="p1", doc_id="d1", title="Diabetes <guideline>",
                        url="https://example.org/metformin",
                        text=HOSTILE + "Metformin is a first-line medicine. " + HOSTILE),
                Passage(id="p2", doc_id="d2", text="Insulin is kept cold.")]
    fields: dict[str, Any] = {
        "passages": passages, "evidence_quote": "a first-line medicine", "category": "FACT",
        "probabilities": {"SUPPORTED": 0.91, "CONTRADICTED": 0.3, "NOT_ENOUGH_INFO": 0.7,
                          "threshold_support": 0.81, "threshold_contradict": 0.4},
        "passage_probabilities": {"p1": {"SUPPORTED": 0.91, "CONTRADICTED": 0.02,
                                         "NOT_ENOUGH_INFO": 0.07},
                                  "p2": {"SUPPORTED": 0.0, "CONTRADICTED": 0.3,
                                         "NOT_ENOUGH_INFO": 0.7}}}
    fields.update(extra)
    return _item("rv-clinical", 0.5, **fields)


def test_the_item_page_puts_claim_decision_quote_and_form_before_the_details() -> None:
    html = _render(_clinical())
    order = [html.index(x) for x in ('id="claim"', 'id="decision"', 'id="quote"',
                                     'id="label-form"', 'id="submit"', 'id="answer"',
                                     "<details", 'id="judge"', 'id="rule"')]
    assert order == sorted(order)
    decision = html[html.index('id="decision"'):html.index('id="label-form"')]
    assert 'id="action">ESCALATE</strong>' in decision and "coverage_gap_high_risk" in decision
    assert '<span class="badge FACT">FACT</span>' in decision
    assert ('(from “Diabetes &lt;guideline&gt;”, passage <code>p1</code>)</span>: '
            '<mark class="quote">a first-line medicine</mark>') in decision
    unsure = _render(_clinical(arbitration={"decision": "ESCALATE", "rule": "not_sure",
                                            "inputs": {"confident": False,
                                                       "not_sure": "a number differs"}}))
    decision = unsure[unsure.index('id="decision"'):unsure.index('id="label-form"')]
    assert 'class="unsure"' in decision and "FACT, not sure:</strong> a number differs" in (
        decision)
    # nothing dropped: the item's facts are all still on the page
    for kept in ("Item <code>rv-clinical</code>", "topic diabetes", "Policy <code>",
                 "Hallucination probability <strong>80%</strong>", "not in the passages",
                 "How?", 'href="https://example.org/metformin"', 'id="shortcuts"'):
        assert kept in html, kept


def test_passages_are_collapsed_with_the_quote_marked_and_hostile_text_escaped() -> None:
    html = _render(_clinical(passages=[Passage(
        id="p1", doc_id="d1", title="Diabetes <guideline>",
        text=HOSTILE + "Metformin is a first-line medicine. " + HOSTILE)]))
    details = re.findall(r"<details[^>]*>.*?</details>", html, re.S)
    assert len(details) == 1 and " open" not in details[0].split(">")[0]
    body = details[0]
    assert ('<details class="card passage deciding" data-passage="p1">' in body)
    escaped = "&lt;script&gt;window.__pwned=4&lt;/script&gt;&lt;/mark&gt;&lt;b&gt;x&lt;/b&gt; "
    assert (escaped + 'Metformin is <mark class="quote">a first-line medicine</mark>. '
            + escaped) in body
    assert body.count("<mark") == body.count("</mark>") == 1
    assert "<script" not in body and "<b>" not in body
    assert html.count("<script") == 1  # the page's own
    assert "this passage supports the claim: 0.91; contradicts: 0.02; neither: 0.07" in body
    missing = _render(_clinical(evidence_quote="not in the text"))
    assert "The judge's quote is not in this passage verbatim" in missing
    assert "no per-passage probabilities recorded" in _render(_clinical(
        passage_probabilities={}))


def test_thresholds_are_a_caption_and_maxima_are_labelled_as_such() -> None:
    html = _render(_clinical())
    table = html[html.index('id="probabilities"'):]
    table = table[:table.index("</table>")]
    caption = table[table.index("<caption"):table.index("</caption>")]
    assert "not one distribution" in caption and "FACT needs" not in html
    decided = html[html.index('id="how-decided"'):]
    decided = decided[:decided.index("</div>")]
    assert "Thresholds this judge used, per passage: support ≥ 0.81, contradiction ≥ 0.40" in (
        decided)
    rows = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td></tr>", table)
    assert [r[1] for r in rows] == ["0.30", "0.70", "0.91"]  # no threshold rows
    assert all("threshold" not in r[0] for r in rows)
    assert "Highest over the passages" in table
    plain = _render(_clinical(probabilities={"SUPPORTED": 0.2, "CONTRADICTED": 0.1,
                                             "NOT_ENOUGH_INFO": 0.7}))
    assert "<caption" not in plain and "Highest over" not in plain and ">Outcome<" in plain
    assert "No probabilities." in _render(_clinical(probabilities={}))


def test_items_from_a_report_keep_each_passages_own_probabilities() -> None:
    claim = Claim(id="c9", text="Metformin is first-line.")
    passage = Passage(id="p1", doc_id="d1", text="Metformin is a first-line medicine.")
    raw = '{"passages": {"p1": {"SUPPORTED": 0.3, "CONTRADICTED": 0.6, "NOT_ENOUGH_INFO": 0.1}}}'
    for output, expected in ((raw, {"p1": {"SUPPORTED": 0.3, "CONTRADICTED": 0.6,
                                           "NOT_ENOUGH_INFO": 0.1}}),
                             ("not json", {}), ('{"passages": [{"id": "p1"}]}', {})):
        verdict = Verdict(claim_id="c9", factual=Analysis(holds=True),
                          counterfactual=Analysis(holds=False), confident=False,
                          not_sure="unsure", raw_output=output)
        result = ClaimResult.from_verdict(claim, [passage], verdict)
        report = Report(answer=Answer(id="a9", text="Metformin is first-line."),
                        results=[result], metrics=compute_metrics([result]), run_id="run9")
        [item] = items_from_report(report, policy=ArbitrationPolicy(not_sure="ESCALATE"))
        assert item.passage_probabilities == expected, output


def test_the_item_page_shows_the_answers_words_beside_a_rewritten_claim(
        client: TestClient, setup: dict[str, Any]) -> None:
    base = _unsure_item()
    claim = base.claim.model_copy(update={"text": "Start metformin with 5000 mg daily.",
                                          "original": "Start with <b>5000 mg</b> daily."})
    item = base.model_copy(update={"claim": claim})
    with RunStore(setup["tmp"] / "runs.db") as store:
        ReviewStore(store).add_items([item])
    _logged_in(client, setup)
    html = client.get(f"/review/items/{item.id}").text
    assert ('id="claim-original">The answer\'s words: “Start with &lt;b&gt;5000 mg&lt;/b&gt; '
            'daily.”') in html
