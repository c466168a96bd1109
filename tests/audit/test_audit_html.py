from __future__ import annotations

import base64
import hashlib
import re
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from medverify.audit.html import (
    ci_text,
    estimate_text,
    gold_agrees,
    render_audit_html,
    source_labels,
    to_node,
    write_audit_html,
)
from medverify.audit.records import (
    AnswerAudit,
    AnswerMetrics,
    AuditMetrics,
    AuditSummary,
    ClaimAudit,
    CleanupOutcome,
    CleanupResult,
    Estimate,
    PairJudgement,
    SupportLabel,
)
from medverify.records import Analysis, Answer, Claim, FetchFailure, Source, Verdict

EVIL = '<script>alert("x")</script>'
QUOTE = 'He said "stop" & <b>left</b>'


class _Page(HTMLParser):
    """Collects what the tests look at: links, script tags and the matrix cells."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.scripts = 0
        self.titles: list[str] = []
        self.cells: list[list[tuple[str, str]]] = []
        self._in_matrix = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "script":
            self.scripts += 1
        if "href" in a:
            self.hrefs.append(a["href"])
            assert a.get("rel") == "noopener noreferrer nofollow"
        if "title" in a:
            self.titles.append(a["title"])
        if tag == "table":
            self._in_matrix = "matrix" in a.get("class", "").split()
        elif tag == "tr" and self._in_matrix:
            self.cells.append([])
        elif tag == "td" and self._in_matrix and "c" in a.get("class", "").split():
            self.cells[-1].append((a["class"], a.get("title", "")))

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_matrix = False


def _parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    return page


def _verdict(claim_id: str, supported: bool, *, quote: str | None = None,
             contradicted: bool = False, error: str | None = None) -> Verdict:
    if error:
        return Verdict(claim_id=claim_id, error=error)
    return Verdict(claim_id=claim_id, factual=Analysis(holds=supported, quote=quote, reason="r"),
                   counterfactual=Analysis(holds=contradicted, quote="opposite" if contradicted
                                           else None))


def _pair(claim_id: str, source_id: str, verdict: Verdict) -> PairJudgement:
    return PairJudgement(claim_id=claim_id, source_id=source_id, verdict=verdict)


def _audit() -> AnswerAudit:
    sources = [
        Source(id="s1", url="https://ok.example/a?x=1&y=2", title=EVIL, text="text " + EVIL,
               status="given"),
        Source(id="s2", url="javascript:alert(1)", text="more text", status="given"),
        Source(id="s3", url="https://gone.example/", status="invalid", http_status=404,
               failure=FetchFailure.HTTP_STATUS, reason=f"HTTP 404 {EVIL}"),
    ]
    claims = [
        ClaimAudit(claim=Claim(id="c1", text=f"Claim one {EVIL}"), gold=SupportLabel.SUPPORTED,
                   cited_source_ids=["s1"], supported=True, supporting_source_ids=["s1"],
                   pairs=[_pair("c1", "s1", _verdict("c1", True, quote=QUOTE)),
                          _pair("c1", "s2", _verdict("c1", False))]),
        ClaimAudit(claim=Claim(id="c2", text="Claim two"), gold=SupportLabel.SUPPORTED,
                   supported=False,
                   pairs=[_pair("c2", "s1", _verdict("c2", False, contradicted=True)),
                          _pair("c2", "s2", _verdict("c2", False))]),
        ClaimAudit(claim=Claim(id="c3", text="Claim three"), supported=None,
                   pairs=[_pair("c3", "s1", _verdict("c3", False, error=f"timeout {EVIL}"))]),
    ]
    cleanup = [CleanupResult(claim_id="c2", source_id="s1", original="Claim two",
                             rewritten=f"Rewritten {EVIL}", outcome=CleanupOutcome.FIXED,
                             reason="dropped the dose",
                             raw_output='{"action": "rewrite", "statement": "Rewritten", '
                                        '"reason": "dropped the dose"}')]
    answer = Answer(id="a1", question=f"Why {EVIL}?", text=f"Answer {EVIL} [1]", sources=sources,
                    meta={"system": EVIL, "field": "Medicine"})
    metrics = AnswerMetrics(n_urls=3, n_valid_urls=2, n_claims=3, n_scored=2, n_supported=1,
                            statement_support=0.5, response_support=False)
    return AnswerAudit(answer=answer, claims=claims, metrics=metrics, cleanup=cleanup,
                       errors=[f"fetch failed {EVIL}"])


def _summary(**extra: object) -> AuditSummary:
    estimate = Estimate(value=0.8333, ci=(0.801, 0.862), n=1414)
    overall = AuditMetrics(n_answers=1, n_urls=1414, url_validity=estimate,
                           invalid_reasons={"http_status": 3, EVIL: 1})
    return AuditSummary(run_id="run-1", overall=overall, judge="builtin", **extra)


def test_hostile_content_is_escaped_and_no_unsafe_link() -> None:
    summary = _summary(url_analysis={EVIL: {"a": [EVIL]}}, errors=[EVIL], skipped=[EVIL],
                       breakdowns={"system": {EVIL: AuditMetrics(n_answers=1)}})
    html = render_audit_html(summary, [_audit()])
    page = _parse(html)
    assert page.scripts == 1 and html.count("<script") == 1  # only the page's own script
    assert EVIL not in html and "&lt;script&gt;" in html
    assert "javascript:" not in "".join(page.hrefs)
    assert all(h.startswith(("https://", "http://")) for h in page.hrefs)
    assert "https://ok.example/a?x=1&amp;y=2" in html
    assert "javascript:alert(1)" in html  # shown as text, never as a link
    assert any(QUOTE in t for t in page.titles)  # quotes survive inside an attribute
    assert "text " + EVIL not in html  # source texts are not dumped into the page


def test_content_security_policy_allows_only_the_page_script() -> None:
    html = render_audit_html(_summary(), [_audit()])
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert policy is not None and "default-src 'none'" in policy.group(1)
    script = re.search(r"<script>(.*?)</script>", html, re.DOTALL)
    assert script is not None
    digest = base64.b64encode(hashlib.sha256(script.group(1).encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy.group(1)


def test_matrix_cells_for_a_hand_built_audit() -> None:
    page = _parse(render_audit_html(_summary(), [_audit()]))
    header, *rows = page.cells
    assert header == []
    states = [[cls.split()[1] for cls, _ in row] for row in rows]
    assert states == [["sup", "nosup", "skip"], ["nosup", "nosup", "skip"],
                      ["err", "skip", "skip"]]
    (c1s1, _, c1s3), (c2s1, _, _), (c3s1, c3s2, _) = rows
    assert "cited" in c1s1[0].split() and c1s1[1].startswith("cited · supported")
    assert QUOTE in c1s1[1]
    assert c1s3[1].startswith("source invalid") and "HTTP 404" in c1s3[1]
    assert c2s1[1].startswith("not supported: contradicted") and "opposite" in c2s1[1]
    assert c3s1[1].startswith("error: timeout") and c3s2[1] == "not paired with this source"


def test_gold_agreement_and_cleanup_shown() -> None:
    html = render_audit_html(_summary(), [_audit()])
    assert html.count("✓ agrees") == 1 and html.count("✗ disagrees") == 1
    assert "dropped the dose" in html and "Rewritten &lt;script&gt;" in html
    claims = _audit().claims
    assert [gold_agrees(c) for c in claims] == [True, False, None]


def test_source_labels_use_short_unique_ids_else_numbers() -> None:
    assert source_labels([Source(id="1"), Source(id="3")]) == ["[1]", "[3]"]
    assert source_labels([Source(id="1"), Source(id="1")]) == ["S1", "S2"]
    assert source_labels([Source(id="a-very-long-id")]) == ["S1"]
    assert source_labels([]) == []


def test_renders_with_no_audits_and_bare_summary() -> None:
    html = render_audit_html(AuditSummary(run_id="bare"), [])
    for text in ("No answers were audited", "No URL analysis was recorded",
                 "SourceCleanup was not run", "No breakdowns were computed", "No invalid URLs"):
        assert text in html
    assert "n/a" in html and html.rstrip().endswith("</html>")


def test_ci_formatting() -> None:
    estimate = Estimate(value=0.8333, ci=(0.801, 0.862), n=1414)
    assert ci_text(estimate) == "95% CI 80.1–86.2%"
    assert estimate_text(estimate) == "83.3% [80.1–86.2]"
    assert ci_text(Estimate()) == "" and estimate_text(Estimate()) == "n/a"
    html = render_audit_html(_summary(), [])
    assert "83.3%" in html and "95% CI 80.1–86.2%" in html and "n = 1,414 URLs" in html


def test_url_analysis_of_any_shape_renders() -> None:
    deep: dict[str, object] = {"x": 1}
    for _ in range(20):
        deep = {"d": deep}
    odd = {
        "deep": deep,
        "mixed": [1, {"a": 2}, [3, None], "s"],
        "many": list(range(500)),
        "records": [{"domain": "a.org", "n": 3}, {"domain": "b.com", "share": 0.25}],
        "by_model": {"m1": {"com": 2}, "m2": {"org": 1.5}},
        "empty": {}, "none": None, "flag": True, "big": 123456.789,
    }
    html = render_audit_html(_summary(url_analysis=odd, notes={"n": [EVIL]}), [])
    assert "a.org" in html and "300 more" in html
    assert "123,456.8" in html and "(none)" in html and EVIL not in html
    node = to_node({**odd, 3: {"odd": object()}})
    assert node.kind == "kv" and dict(node.items)["3"].kind == "kv"
    assert dict(node.items)["records"].kind == "table"
    assert dict(node.items)["by_model"].headers == ["", "com", "org"]


def test_groups_are_compared_in_one_table_then_detailed() -> None:
    groups = {"m1": {"n": 3, "top": [{"d": "a.org", "c": 2}]},
              "m2": {"n": 5, "top": [{"d": "b.com", "c": 1}], "extra": None}}
    node = to_node(groups)
    assert node.kind == "stack"
    table, details = node.children
    assert table.headers == ["", "n", "extra"]
    assert [[c.text for c in row] for row in table.rows] == [["m1", "3", "—"], ["m2", "5", "—"]]
    assert [name for name, _ in details.items] == ["m1", "m2"]
    html = render_audit_html(_summary(url_analysis={"groups": groups}), [])
    assert "a.org" in html and "b.com" in html


def test_write_is_atomic_and_returns_path(tmp_path: Path) -> None:
    target = tmp_path / "out" / "report.html"
    summary, audits = _summary(), [_audit()]
    assert write_audit_html(target, summary, audits) == target
    assert target.read_text("utf-8") == render_audit_html(summary, audits)
    assert [p.name for p in target.parent.iterdir()] == ["report.html"]


@pytest.mark.timeout(60)
def test_large_audit_renders_fast_and_compact() -> None:
    audit = _audit()
    sources = [Source(id=f"s{j}", url=f"https://h{j}.example/p", text="t" * 5000,
                      status="given") for j in range(5)]
    claims = [ClaimAudit(claim=Claim(id=f"c{k}", text="A medical statement of some length. " * 3),
                         supported=False,
                         pairs=[_pair(f"c{k}", f"s{j}", _verdict(f"c{k}", j == k, quote="q " * 60))
                                for j in range(5)]) for k in range(6)]
    answer = audit.answer.model_copy(update={"sources": sources, "text": "Answer. " * 150})
    big = audit.model_copy(update={"answer": answer, "claims": claims})
    started = time.perf_counter()
    html = render_audit_html(_summary(), [big] * 263)
    elapsed = time.perf_counter() - started
    assert elapsed < 60.0  # hang guard against quadratic rendering, not a speed target
    assert len(html.encode("utf-8")) < 8_000_000
    assert html.count('<details class="answer') == 263
