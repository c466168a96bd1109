"""The review queue in a real browser at 1280x800 (issue 43): at least 12 rows fit the first
screen, the claim column is wide, no column is empty on every row, and the question and
answer open from the row. Playwright drives Debian's Chromium against the real server;
marked ``browser`` (``pytest -m browser``), skipped without Playwright or Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.records import Claim, Document, Passage, Span
from medverify.review import ReviewItem
from medverify.store.access import KeyStore, Role
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import scripted_judge
from medverify.testing.service import ServiceThread

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("playwright.sync_api",
                    reason="Playwright is not installed (pip install playwright: the dev extra)")

from chromium_browser import browser  # noqa: F401  (the fixture)

pytestmark = pytest.mark.browser

QUESTION = "How is type 2 diabetes treated <b>first</b>, and what should patients watch for?"
CLAIMS = [
    "Metformin is the first medicine for most adults with type 2 diabetes.",
    "The usual starting dose of metformin is 500 mg once or twice a day with meals.",
    "Metformin should be stopped before an iodinated contrast scan in people whose kidney "
    "function is reduced, and restarted 48 hours later if it is stable.",
    "Lactic acidosis is a rare but serious side effect of metformin.",
    "HbA1c should be checked every 3 to 6 months until it is at target.",
    "SGLT2 inhibitors lower the risk of heart failure hospitalisation.",
    "GLP-1 receptor agonists cause weight loss in most patients.",
    "Insulin pens in use can be kept at room temperature for up to 28 days.",
    "Sulfonylureas can cause low blood sugar, especially in older adults.",
    "People with type 2 diabetes should have a dilated eye exam every year.",
    "A foot check at every visit lowers the risk of amputation.",
    "Statins are recommended for most adults with diabetes aged 40 to 75.",
    "Blood pressure should be kept under 130/80 mmHg in most people with diabetes.",
    "Pioglitazone is contraindicated in people with heart failure.",
    "Metformin can lower vitamin B12 levels over years of use <script>window.__pwned=1"
    "</script>.",
    "Alcohol raises the risk of hypoglycaemia with insulin or sulfonylureas.",
    "DPP-4 inhibitors are taken as one tablet a day and rarely cause hypoglycaemia.",
    "Annual urine albumin tests find kidney disease early.",
]
WHY = ["the verdict is not sure and the claim states a dose",
       "an exact check found the evidence states something else (number / dose)",
       "the knowledge base does not cover it"]
REASON = ("P(supported)=0.57, below the 0.81 needed for 70% precision; passage 'Metformin "
          "label' points the other way, more weakly")


def _items(filled: bool = False) -> list[ReviewItem]:
    """The queue's items; ``filled``: every other one with a risk and a topic."""
    answer = " ".join(CLAIMS)
    items = []
    for n, claim in enumerate(CLAIMS):
        at = answer.index(claim)
        rule = ("not_sure_clinical", "vetoed", "coverage_gap")[n % 3]
        items.append(ReviewItem(
            id=f"rv-{n:02d}", run_id="run1", answer_id="a1", question=QUESTION,
            answer_text=answer, claim=Claim(id=f"c{n}", text=claim,
                                            span=Span(start=at, end=at + len(claim))),
            passages=[Passage(id="p1", doc_id="d1", text="Metformin is first-line.")],
            category=("FACT", "HALLUCINATION", "COVERAGE_GAP")[n % 3],
            arbitration={"decision": "ESCALATE", "rule": rule, "policy": "arbitration/v1",
                         "inputs": {"confident": False, "not_sure": REASON,
                                    "clinical": "dose"}},
            priority=round(1.0 - n / 40, 3), created_at=datetime.now(UTC),
            risk=0.4 + n / 50 if filled and n % 2 else None,
            topic="diabetes" if filled and n % 2 else None))
    return items


@pytest.fixture(params=[False, True], ids=["no-risk-or-topic", "risk-and-topic"])
def server(request: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="metformin", title="Metformin",
                            text="Metformin is a first-line medicine for type 2 diabetes.")])
    with RunStore(tmp_path / "runs.db") as store:
        secret = KeyStore(store).create("reviewer key", Role.REVIEWER).secret
        ReviewStore(store).add_items(_items(request.param))
    register_fake("queue-browser", ScriptedProvider(scripted_judge(lambda c, p: (False, False))))
    config = Config(kb=tmp_path / "kb", store=tmp_path / "runs.db",
                    cache_path=tmp_path / "cache.db", model="fake:queue-browser",
                    decomposer="rules")
    try:
        with ServiceThread(config) as service:
            yield {"url": service.url, "secret": secret, "filled": request.param}
    finally:
        unregister_fake("queue-browser")


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    yield opened
    context.close()


def _open_queue(page: Any, server: dict[str, Any]) -> None:
    page.goto(server["url"] + "/review")
    page.fill("#key", server["secret"])
    with page.expect_navigation():
        page.click("#login")
    assert page.url == server["url"] + "/review"


def _cells(page: Any) -> list[list[str]]:
    return [[" ".join(c.inner_text().split()) for c in row.locator("td").all()]
            for row in page.locator("#queue tbody tr").all()]


def test_the_queue_fits_twelve_rows_with_a_wide_claim_column(
        page: Any, server: dict[str, Any], tmp_path: Path) -> None:
    _open_queue(page, server)
    rows = page.locator("#queue tbody tr")
    assert rows.count() == len(CLAIMS) >= 17
    boxes = [r.bounding_box() for r in rows.all()]
    visible = sum(1 for b in boxes if b and b["y"] >= 0 and b["y"] + b["height"] <= 800)
    table = page.locator("#queue").bounding_box()
    claim = page.locator("#queue th.claim").bounding_box()
    share = claim["width"] / table["width"]
    headers = [h.inner_text().strip() for h in page.locator("#queue thead th").all()]
    print(f"queue at 1280x800: {visible} of {len(boxes)} rows fully above the fold; claim "
          f"column {claim['width']:.0f} of {table['width']:.0f} px ({share:.0%}); "
          f"columns {headers}")
    page.screenshot(path=str(tmp_path / "queue.png"))
    assert visible >= 12
    assert share >= 0.40
    cells = _cells(page)
    empty = [headers[i] for i in range(len(headers))
             if all(row[i] in ("-", "–", "") for row in cells)]
    assert not empty, f"columns empty on every row: {empty}"
    shown = {"Risk", "Topic"} & set(headers)
    assert shown == ({"Risk", "Topic"} if server["filled"] else set())  # only when filled
    assert page.evaluate("typeof window.__pwned") == "undefined"


def test_the_question_and_answer_are_one_click_away_and_the_why_is_short(
        page: Any, server: dict[str, Any]) -> None:
    _open_queue(page, server)
    first = page.locator("#queue tbody tr").first
    context = first.locator("details.context > div")
    assert not context.is_visible()
    first.locator("details.context > summary").click(position={"x": 4, "y": 6})
    assert context.is_visible()
    shown = context.inner_text()
    assert QUESTION in shown and CLAIMS[-1] in shown  # the tags as text, not markup
    assert page.locator("#queue b").count() == 0
    why = first.locator("td.why")
    assert why.get_attribute("title").startswith(WHY[0])
    assert len(why.inner_text()) <= 44
    # the claim link still goes to the item page
    with page.expect_navigation():
        first.locator("a.clamp").click()
    assert page.url.endswith("/review/items/rv-00")
