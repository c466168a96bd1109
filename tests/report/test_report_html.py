from __future__ import annotations

import os
import re
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

from medverify.arbitration import arbitrate_all
from medverify.config import ArbitrationPolicy
from medverify.records import (
    Analysis,
    Answer,
    Category,
    CheckFinding,
    CheckKind,
    Claim,
    ClaimResult,
    Passage,
    Report,
    Span,
    Verdict,
)
from medverify.report.html import render_html, segment_answer, write_html
from medverify.report.metrics import compute_metrics
from report_fixtures import PASSAGES, example_answer, example_report, example_results, result_of


class AnswerParser(HTMLParser):
    """Collects the answer text as shown (without the claim number badges) and the text
    highlighted for each claim number."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0  # > 0 inside div.answer-text
        self.in_sup = 0
        self.mark_claims: list[str] | None = None
        self.shown: list[str] = []
        self.highlighted: dict[str, list[str]] = defaultdict(list)
        self.mark_classes: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if self.depth:
            self.depth += tag != "br"
            self.in_sup += tag == "sup"
            if tag == "mark":
                self.mark_claims = (a.get("data-claims") or "").split()
                self.mark_classes.append(a.get("class") or "")
        elif tag == "div" and "answer-text" in (a.get("class") or ""):
            self.depth = 1

    def handle_endtag(self, tag: str) -> None:
        if not self.depth:
            return
        self.depth -= 1
        self.in_sup -= tag == "sup"
        if tag == "mark":
            self.mark_claims = None

    def handle_data(self, data: str) -> None:
        if not self.depth or self.in_sup:
            return
        self.shown.append(data)
        for n in self.mark_claims or []:
            self.highlighted[n].append(data)


def parse_answer(html: str) -> AnswerParser:
    parser = AnswerParser()
    parser.feed(html)
    return parser


def test_example_renders_and_is_written_for_inspection(tmp_path: Path) -> None:
    report = example_report()
    html = render_html(report)
    assert html.startswith("<!DOCTYPE html>")
    for expected in (
        "57.1%",
        "Not supported",
        "judge timed out after 60 s",
        "Coverage gap",
        "kb-diabetes-2024-06@3f9a2c1e",
        "run-20240611-142233-7c1d",
        "openai:gpt-4o-mini-2024-07-18",
        "judge/v1",
        "9,873",
        "The Cochrane review finds no increased risk.",
    ):
        assert expected in html, expected
    write_html(report, tmp_path / "r.html")
    assert (tmp_path / "r.html").read_text(encoding="utf-8") == html


def test_every_highlight_is_exactly_its_span() -> None:
    report = example_report()
    parsed = parse_answer(render_html(report))
    assert "".join(parsed.shown) == report.answer.text
    located = [(n, r) for n, r in enumerate(report.results, 1) if r.claim.span]
    assert len(located) == 7
    for n, result in located:
        span = result.claim.span
        assert span is not None
        assert "".join(parsed.highlighted[str(n)]) == report.answer.text[span.start : span.end]
    assert "8" not in parsed.highlighted  # the claim without a span is listed, not highlighted


def test_claims_without_a_place_are_listed_below_the_answer() -> None:
    html = render_html(example_report())
    unlocated = html[html.index("Claims not located in the answer text") :]
    assert "Metformin is taken by mouth." in unlocated[:2000]


def _claim(cid: str, span: Span | None, text: str = "claim") -> Claim:
    return Claim(id=cid, text=text, span=span)


def test_overlapping_nested_and_invalid_spans_render_sensibly() -> None:
    text = "Aspirin reduces fever and it thins the blood."
    results = [
        result_of(Category.FACT).model_copy(update={"claim": _claim("a", Span(start=0, end=24))}),
        result_of(Category.HALLUCINATION).model_copy(
            update={"claim": _claim("b", Span(start=8, end=45))}
        ),
        result_of(Category.COVERAGE_GAP).model_copy(
            update={"claim": _claim("c", Span(start=16, end=21))}
        ),
        result_of(Category.FACT).model_copy(
            update={"claim": _claim("d", Span(start=30, end=99), "out of range")}
        ),
        result_of(Category.FACT).model_copy(
            update={"claim": _claim("e", Span(start=5, end=5), "empty span")}
        ),
    ]
    report = example_report(results, Answer(text=text, question="Q?"))
    parsed = parse_answer(render_html(report))
    assert "".join(parsed.shown) == text
    for n, (start, end) in {"1": (0, 24), "2": (8, 45), "3": (16, 21)}.items():
        assert "".join(parsed.highlighted[n]) == text[start:end]
    assert "4" not in parsed.highlighted and "5" not in parsed.highlighted
    assert any("hl-multi" in c and "hl-hallucination" in c for c in parsed.mark_classes)
    listed = render_html(report).split("Claims not located in the answer text")[1][:3000]
    assert "out of range" in listed and "empty span" in listed


def test_segments_take_the_most_severe_colour() -> None:
    text = "one two three"
    results = [
        result_of(Category.FACT).model_copy(update={"claim": _claim("a", Span(start=0, end=13))}),
        result_of(Category.JUDGMENT_ERROR).model_copy(
            update={"claim": _claim("b", Span(start=4, end=7))}
        ),
    ]
    segments = segment_answer(text, results)
    assert [s.text for s in segments] == ["one ", "two", " three"]
    assert [s.claims for s in segments] == [(1,), (1, 2), (1,)]
    assert [s.category for s in segments] == [Category.FACT, Category.JUDGMENT_ERROR, Category.FACT]
    assert [s.ends for s in segments] == [(), (2,), (1,)]
    assert segment_answer("", []) == []


def hostile_report() -> Report:
    evil = '<script>alert("x")</script>'
    claim = Claim(
        id='c"><script>alert(1)</script>', text=f"Claim {evil}", span=Span(start=0, end=10)
    )
    passage = Passage(
        id="p1",
        doc_id="d<b>1</b>",
        text=f"evidence {evil}",
        title=f"Title {evil}",
        url="javascript:alert(document.cookie)",
    )
    good = Passage(
        id="p2", doc_id="d2", text="fine", title="Good", url="https://example.org/a?b=1&c=2"
    )
    verdict = Verdict(
        claim_id=claim.id,
        passage_ids=["p1", "p2"],
        factual=Analysis(
            holds=True, passage_id="p1", quote=f"quote {evil}", reason=f"reason {evil}"
        ),
        counterfactual=Analysis(holds=False, reason="<img src=x onerror=alert(1)>"),
        judge="fake",
        raw_output=f"raw {evil}",
    )
    result = ClaimResult.from_verdict(claim, [passage, good], verdict)
    failed = ClaimResult.failed(Claim(id="c2", text="t"), f"error {evil}")
    answer = Answer(text=f"{evil} and more {evil}", question=f"Q {evil}")
    report = example_report([result, failed], answer)
    return report.model_copy(update={"errors": [f"run {evil}"], "models": {"judge": evil}})


def test_hostile_text_is_escaped_everywhere() -> None:
    html = render_html(hostile_report())
    assert html.count("<script") == 1  # the page's own script, nothing else
    assert "<img" not in html and "<b>1</b>" not in html
    assert "&lt;script&gt;alert(" in html
    assert 'href="javascript:' not in html
    assert 'href="https://example.org/a?b=1&amp;c=2"' in html
    parsed = parse_answer(html)
    assert "".join(parsed.shown) == hostile_report().answer.text


def test_only_http_links_are_links() -> None:
    results = example_results()
    odd = [
        p.model_copy(update={"url": url})
        for p, url in zip(
            PASSAGES.values(),
            ["ftp://x.org/f", "data:text/html,hi", "//evil.example", "/local", None],
            strict=True,
        )
    ]
    results[0] = results[0].model_copy(update={"passages": odd})
    html = render_html(example_report(results))
    for url in ("ftp://x.org/f", "data:text/html,hi", "//evil.example", "/local"):
        assert f'href="{url}"' not in html
    assert 'href="https://www.nice.org.uk/guidance/ng28"' in html


def test_page_is_self_contained() -> None:
    html = render_html(example_report())
    assert "<link" not in html
    assert not re.search(r"""src\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html and "url(" not in html


def test_error_claims_show_their_cause_and_are_counted_apart() -> None:
    html = render_html(example_report())
    card = html[html.index('id="claim-5"') :]
    card = card[: card.index("</article>")]
    assert "Not scored." in card and "judge timed out after 60 s (4 retries)" in card
    assert '<span class="score">not scored</span>' in card


def test_empty_report_renders() -> None:
    html = render_html(example_report([], example_answer()))
    assert "No claims were extracted" in html and "n/a" in html and "Unknown" in html


def test_write_html_is_atomic(tmp_path: Path) -> None:
    write_html(example_report(), tmp_path / "report.html")
    assert os.listdir(tmp_path) == ["report.html"]


# ---- confident or not sure -------------------------------------------------------------

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(2)>'
REASON = f"P(supported)=0.62, below the 0.81 needed for 70% precision {HOSTILE}"


def assessed_report(veto: bool = False) -> Report:
    """The example with claim 1 not sure (one finding with hostile text) and claim 2
    confident at 93%."""
    report = example_report()
    results = list(report.results)
    first = results[0]
    assert first.verdict is not None
    finding = CheckFinding(kind=CheckKind.NUMBER, veto=veto, passage_id="ada-9#3",
                           claim_says=f"every 2 years {HOSTILE}", passage_says="every 10 years",
                           reason=f"the claim says every 2 years; the passage says {HOSTILE}")
    verdict = first.verdict.model_copy(update={
        "findings": [finding], "confident": False, "confidence": 0.62, "not_sure": REASON})
    results[0] = ClaimResult.from_verdict(first.claim, first.passages, verdict)
    results[1] = results[1].model_copy(update={"confident": True, "confidence": 0.934})
    return report.model_copy(update={"results": results, "metrics": compute_metrics(results)})


def _card(html: str, number: int) -> str:
    card = html[html.index(f'id="claim-{number}"'):]
    return card[: card.index("</article>")]


def test_a_not_sure_card_shows_the_marker_the_reason_and_the_findings() -> None:
    html = render_html(assessed_report())
    card = _card(html, 1)
    assert "unsure-chip" in card and '<span aria-hidden="true">?</span>Not sure</span>' in card
    assert ("<strong>FACT, not sure:</strong> P(supported)=0.62, below the 0.81 needed for "
            "70% precision &lt;script&gt;") in card
    assert ("<li><strong>number</strong> (not sure): the claim says every 2 years; the "
            "passage says &lt;script&gt;") in card
    assert "claim: “every 2 years &lt;script&gt;" in card
    assert "Warning: the claim says" not in card  # listed once, as a finding
    confident = _card(html, 2)
    assert '<span class="conf" title="The verdict\'s calibrated confidence: the probability ' \
        'that its category is right">confident, 93%</span>' in confident
    assert "Not sure" not in confident
    assert "Not sure" not in _card(html, 3) and "confident" not in _card(html, 3)


def test_not_sure_text_is_escaped_everywhere() -> None:
    html = render_html(assessed_report())
    assert html.count("<script") == 1 and "<img" not in html  # the page's own script only
    assert 'title="The category is kept but the verdict is not sure: P(supported)=0.62' in html


def test_the_answer_and_the_summary_tell_not_sure_apart() -> None:
    html = render_html(assessed_report())
    parsed = parse_answer(html)
    assert "hl-unsure" in parsed.mark_classes[0]
    assert sum("hl-unsure" in c for c in parsed.mark_classes) == 1
    assert 'title="Claim 1: Fact (not sure)"' in html and 'title="Claim 2: Fact"' in html
    assert '<span class="split">1 confident · 1 not sure</span>' in html
    plain = render_html(example_report())
    assert not any("hl-unsure" in c for c in parse_answer(plain).mark_classes)
    assert 'class="split"' not in plain and 'class="conf"' not in plain
    assert 'class="chip fact unsure-chip"' not in plain and "Not sure</span>" not in plain


def test_an_arbitrated_not_sure_card_shows_its_rule_and_inputs() -> None:
    report = assessed_report()
    results = arbitrate_all(report.results, ArbitrationPolicy(escalation_budget=1.0))
    html = render_html(report.model_copy(update={"results": results,
                                                 "metrics": compute_metrics(results)}))
    card = _card(html, 1)
    assert "rule <code>not_sure_clinical</code>" in card and "· confident no" in card
    # under the default budget (2 of 8 claims) the error and the judgment error go first
    capped = arbitrate_all(report.results, ArbitrationPolicy())
    html = render_html(report.model_copy(update={"results": capped,
                                                 "metrics": compute_metrics(capped)}))
    assert "rule <code>over_budget</code>" in _card(html, 1)
    assert "· escalation_rule not_sure_clinical" in _card(html, 1)
    assert "· not_sure" not in card  # the reason is shown once, above
    assert "· confident yes" in _card(html, 2)
