"""The fact-check HTML page and terminal summary, on hand-built reports."""

from __future__ import annotations

import re
from pathlib import Path

from rich.console import Console

from medverify.factcheck.records import (
    AnswerVersion,
    Fact,
    FactCheckReport,
    FactStep,
    FactTrace,
    FactVerdict,
    RagAnswer,
    Rewrite,
    SentenceLink,
    TokenSummary,
    TraceCandidate,
)
from medverify.factcheck.report import (
    print_factcheck,
    render_factcheck_html,
    word_diff,
    write_factcheck_html,
)
from medverify.records import Category, Claim, Passage, Usage, Verdict

EVIL = '<script>alert("x")</script>'


def _passage(pid: str, text: str, url: str | None, title: str | None = None) -> Passage:
    return Passage(id=pid, doc_id=f"doc-{pid}", text=text, title=title or f"Guide {pid}", url=url)


def make_report(*, mode: str = "llm", evil: str = "") -> FactCheckReport:
    passages = {
        "p1": _passage("p1", "Adults start metformin at 500 mg once daily." + evil,
                       "https://example.org/metformin"),
        "p2": _passage("p2", "Metformin is not contraindicated in asthma.",
                       "javascript:alert(1)", title="Bad link " + evil),
    }
    wrong_dose = Fact(
        id="f1", claim=Claim(id="f1", text="Adults start metformin at 2000 mg daily."),
        steps=[
            FactStep(round=1, text="Adults start metformin at 2000 mg daily.",
                     passage_ids=["p1", "p2"], verdict=FactVerdict.FALSE,
                     category=Category.HALLUCINATION,
                     rewrite=Rewrite(before="Adults start metformin at 2000 mg daily.",
                                     after="Adults start metformin at 500 mg daily." + evil,
                                     mode=mode, evidence_passage_id="p1",
                                     evidence_quote="500 mg once daily")),
            FactStep(round=2, text="Adults start metformin at 500 mg daily." + evil,
                     passage_ids=["p1"], verdict=FactVerdict.TRUE, category=Category.FACT),
        ],
        final_text="Adults start metformin at 500 mg daily." + evil,
        final_verdict=FactVerdict.TRUE, corrected=True,
        trace=FactTrace(method="similarity", best_passage_id="p1", candidates=[
            TraceCandidate(passage_id="p1", score=0.91), TraceCandidate(passage_id="p2",
                                                                        score=0.42)]),
    )
    kept = Fact(
        id="f2", claim=Claim(id="f2", text="Metformin lowers blood sugar."),
        steps=[FactStep(round=1, text="Metformin lowers blood sugar.", passage_ids=["p2"],
                        verdict=FactVerdict.ERROR, category=Category.ERROR)],
        final_text="Metformin lowers blood sugar.", final_verdict=FactVerdict.ERROR,
        trace=FactTrace(method="llm", error="unparseable trace output: " + evil,
                        raw_output=evil),
    )
    initial = "Adults start metformin at 2000 mg daily. Metformin lowers blood sugar."
    final = "Adults start metformin at 500 mg daily. Metformin lowers blood sugar." + evil
    return FactCheckReport(
        question="What is the starting dose of metformin? " + evil,
        initial_answer=initial,
        rag=RagAnswer(question="q", text=initial, chunks=[passages["p1"]], model="fake:gen",
                      prompt_version="answer/v1"),
        facts=[wrong_dose, kept], passages=passages, rounds_run=2,
        final_answer=final, final_mode=mode,
        versions=[AnswerVersion(label="initial", text=initial, mode="initial"),
                  AnswerVersion(label="final", text=final, mode=mode)],
        sentences=[
            SentenceLink(sentence="Adults start metformin at 500 mg daily.", fact_ids=["f1"],
                         passage_id="p1", doc_id="doc-p1", title="Guide p1",
                         url="https://example.org/metformin"),
            SentenceLink(sentence="Metformin lowers blood sugar." + evil, fact_ids=["f2"],
                         passage_id="p2", doc_id="doc-p2", title="Bad link",
                         url="javascript:alert(1)"),
        ],
        tokens=TokenSummary(initial_answer_tokens=400, check_tokens=1000, ratio=2.5,
                            per_stage={"decompose": 300, "judge": 700}),
        usage={"judge": Usage(calls=2, prompt_tokens=600, completion_tokens=100)},
        models={"judge": "fake:judge"}, prompt_versions={"judge": "judge/v1"},
        kb_snapshot="kb-123", config={"factcheck": {"max_rounds": 3}},
        errors=["something failed " + evil],
    )


def test_word_diff_marks_and_escapes() -> None:
    diff = str(word_diff("take 2000 mg <b>daily</b>", "take 500 mg <b>daily</b> & more"))
    assert "<del>2000</del> <ins>500</ins>" in diff
    assert "<ins> &amp; more</ins>" in diff
    assert "&lt;b&gt;daily&lt;/b&gt;" in diff and "<b>" not in diff
    assert str(word_diff("same text", "same text")) == "same text"


def test_html_escapes_hostile_text_and_has_no_script() -> None:
    page = render_factcheck_html(make_report(evil=EVIL))
    assert "<script" not in page.lower()
    assert "&lt;script&gt;" in page
    assert 'href="javascript' not in page
    assert "script-src" not in page and "default-src 'none'" in page


def test_html_shows_diffs_links_rounds_and_tokens() -> None:
    page = render_factcheck_html(make_report())
    assert "<del>2000</del> <ins>500</ins>" in page  # fact diff and version diff
    assert page.count("<del>2000</del> <ins>500</ins>") >= 2
    assert 'href="https://example.org/metformin"' in page
    assert 'rel="noopener noreferrer nofollow"' in page
    assert "LLM rewrite" in page and "extractive correction (the" not in page
    for verdict in ("TRUE", "FALSE", "ERROR"):
        assert f"</span> {verdict}</span>" in page
    assert "0.910" in page and "0.420" in page  # trace candidates with scores
    assert "2.50×" in page and "1,000" in page  # tokens and ratio
    assert "judge/v1" in page and "kb-123" in page and "max_rounds" in page
    assert "something failed" in page
    assert "answer/v1" in page  # the RAG answer's provenance
    anchors = set(re.findall(r'id="(passage-\d+)"', page))
    assert anchors and all(f'href="#{a}"' in page for a in anchors)


def test_extractive_mode_is_labelled_as_such(tmp_path: Path) -> None:
    out = write_factcheck_html(tmp_path / "r.html", make_report(mode="extractive"))
    page = out.read_text("utf-8")
    assert "Offline correction." in page
    assert "extractive correction (the contradicting evidence sentence, not a rewrite)" in page
    assert "LLM rewrite" not in page


def test_minimal_report_renders() -> None:
    report = FactCheckReport(initial_answer="x", final_answer="x")
    page = render_factcheck_html(report)
    assert "No atomic facts were extracted" in page and "unknown" in page


def test_terminal_summary_prints_plain_text() -> None:
    console = Console(record=True, width=160, color_system=None)
    print_factcheck(make_report(mode="extractive", evil="[bold]x[/bold]"), console)
    text = console.export_text()
    assert "FALSE → ✓ TRUE" in text
    assert "[extractive]" in text and "[bold]x[/bold]" in text
    assert "1,000" in text and "2.50×" in text
    assert "Run errors (1):" in text and "something failed" in text
    assert "Fact errors (1):" in text and "no cause recorded" in text
    assert "offline: false facts replaced" in text


def test_terminal_names_each_fact_error_cause_once() -> None:
    report = make_report()
    failing = FactStep(round=1, text="x", verdict=FactVerdict.ERROR, category=Category.ERROR,
                       judge_verdict=Verdict(claim_id="f", error="judge call failed: refused"))
    facts = [Fact(id=f"e{i}", claim=Claim(id=f"e{i}", text="x"), steps=[failing],
                  final_text="x", final_verdict=FactVerdict.ERROR) for i in range(3)]
    report = report.model_copy(update={"facts": facts, "errors": ["a", "a"]})
    console = Console(record=True, width=200, color_system=None)
    print_factcheck(report, console)
    text = console.export_text()
    assert "Fact errors (3):" in text and text.count("judge call failed: refused") == 1
    assert "3 × judge call failed: refused" in text and "2 × a" in text
