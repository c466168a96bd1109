"""``medverify factcheck`` and ``medverify eval factcheck`` end to end (offline)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import medverify.judge.builtin as builtin
from medverify.cli import main
from medverify.cli.factcheck import baseline_path
from medverify.errors import ProviderError
from medverify.factcheck.records import FactCheckReport, FactVerdict, SelfRefineResult
from medverify.kb import KnowledgeBase
from medverify.llm.base import ChatRequest
from medverify.records import Document
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.verifier import LexicalVerifier

DOCS = [
    Document(doc_id="metformin", title="Metformin dosing", url="https://example.org/metformin",
             text="Adults usually start metformin at 500 mg once daily with meals. The dose "
                  "is raised slowly to limit stomach upset."),
    Document(doc_id="flu", title="Influenza vaccine",
             text="Influenza vaccination is recommended every year for people aged 6 months "
                  "and older."),
]
ANSWER = "Adults usually start metformin at 2000 mg once daily with meals."


@pytest.fixture
def kb_dir(tmp_path: Path) -> Path:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest(DOCS)
    return tmp_path / "kb"


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in judge with a lexical stand-in for the verifier weights."""
    monkeypatch.setattr(builtin, "load_verifier", lambda path=None: LexicalVerifier())


def _invoke(*args: str, stdin: str | None = None) -> Result:
    return CliRunner(env={"COLUMNS": "160"}).invoke(main, list(args), input=stdin)


def test_offline_factcheck_corrects_extractively_and_writes_reports(
        kb_dir: Path, tmp_path: Path, offline: None) -> None:
    answer = tmp_path / "answer.txt"
    answer.write_text(ANSWER, "utf-8")
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    result = _invoke("factcheck", str(answer), "--kb", str(kb_dir), "-q", "Metformin dose?",
                     "--json", str(out_json), "--html", str(out_html))
    assert result.exit_code == 0, result.output
    assert "offline: no model given" in result.output
    report = FactCheckReport.model_validate_json(out_json.read_text("utf-8"))
    assert report.question == "Metformin dose?" and report.final_mode == "extractive"
    [fact] = report.facts
    assert fact.initial_verdict == FactVerdict.FALSE and fact.corrected
    assert "500 mg" in report.final_answer and "2000" not in report.final_answer
    assert fact.steps[0].rewrite is not None and fact.steps[0].rewrite.mode == "extractive"
    assert fact.trace is not None and fact.trace.best_passage_id in report.passages
    page = out_html.read_text("utf-8")
    assert "<del>2000</del>" in page and "Offline correction." in page
    assert 'href="https://example.org/metformin"' in page
    assert "Atomic facts" in result.output and "FALSE" in result.output
    listed = _invoke("runs", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert any(run.get("kind") == "factcheck" for run in json.loads(listed.output))


def test_offline_factcheck_reads_stdin_and_skips_the_store(
        kb_dir: Path, tmp_path: Path, offline: None) -> None:
    store = tmp_path / "runs.db"
    result = _invoke("factcheck", "--kb", str(kb_dir), "--no-record", "--store", str(store),
                     "--rounds", "1", stdin="Influenza vaccination is recommended every year.")
    assert result.exit_code == 0, result.output
    assert "TRUE" in result.output and not store.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--baseline", "selfrefine"], "--baseline selfrefine needs a model"),
    (["--judge", "llm"], "--judge llm needs a model"),
    (["--trace", "llm"], "--trace llm needs a model"),
])
def test_model_only_options_without_a_model_exit_2(kb_dir: Path, args: list[str],
                                                   message: str) -> None:
    result = _invoke("factcheck", "--kb", str(kb_dir), *args, stdin=ANSWER)
    assert result.exit_code == 2 and message in result.output


def test_no_answer_and_no_model_exit_2(kb_dir: Path) -> None:
    result = _invoke("factcheck", "--kb", str(kb_dir), "-q", "Metformin dose?", stdin="")
    assert result.exit_code == 2 and "no answer to check" in result.output
    missing = _invoke("factcheck", "-", stdin=ANSWER)
    assert missing.exit_code == 2 and "no knowledge base given" in missing.output


def test_baseline_file_name() -> None:
    assert baseline_path(Path("out/r.json")) == Path("out/r.selfrefine.json")


# -- eval factcheck -------------------------------------------------------------------------


def test_eval_factcheck_prints_matrix_and_writes_json(
        kb_dir: Path, tmp_path: Path, offline: None) -> None:
    answers = tmp_path / "answers.jsonl"
    answers.write_text(
        json.dumps({"question": "Metformin dose?", "answer": ANSWER}) + "\n"
        + json.dumps({"question": "Flu?", "answer": "Influenza vaccination is recommended "
                      "every year."}) + "\n", "utf-8")
    reports = tmp_path / "reports.json"
    ran = _invoke("factcheck", str(answers), "--kb", str(kb_dir), "--json", str(reports),
                  "--no-record", "--html", str(tmp_path / "html"))
    assert ran.exit_code == 0, ran.output
    assert len(list((tmp_path / "html").glob("*.html"))) == 2
    labels = tmp_path / "labels.csv"
    labels.write_text("question,fact,label\n"
                      f'Metformin dose?,"{ANSWER}",false\n'
                      "Flu?,Influenza vaccination is recommended every year.,true\n"
                      "Flu?,Not a fact of any answer,true\n", "utf-8")
    ratings = tmp_path / "ratings.jsonl"
    ratings.write_text('{"answer_id": "a", "rating": "improved"}\n', "utf-8")
    out = tmp_path / "eval.json"
    result = _invoke("eval", "factcheck", str(reports), "--labels", str(labels),
                     "--ratings", str(ratings), "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "2 of 3 labels matched" in result.output
    assert "TP 1" in result.output and "TN 1" in result.output
    assert "warning: unmatched label" in result.output
    assert "improved 1" in result.output
    data = json.loads(out.read_text("utf-8"))
    assert data["scores"]["sensitivity"] == 1.0 and data["scores"]["specificity"] == 1.0


def test_eval_factcheck_bad_labels_exit_2(tmp_path: Path) -> None:
    reports = tmp_path / "r.json"
    reports.write_text(FactCheckReport(initial_answer="x", final_answer="x").model_dump_json())
    labels = tmp_path / "l.jsonl"
    labels.write_text('{"fact": "x", "label": "perhaps"}\n')
    result = _invoke("eval", "factcheck", str(reports), "--labels", str(labels))
    assert result.exit_code == 2 and "unknown fact label" in result.output


# -- with the scripted flow model -----------------------------------------------------------

FLOW_DOCS = [
    Document(doc_id="metformin", title="Metformin dosing", url="https://example.org/metformin",
             text="Metformin is a first-line medicine for type 2 diabetes. The usual starting "
             "dose of metformin is 500 mg once or twice daily, taken with meals. Stomach upset "
             "is a common side effect of metformin when starting treatment."),
    Document(doc_id="metformin-safety", title="Metformin contraindications",
             text="Metformin is contraindicated in people with severe kidney disease. Metformin "
             "should be paused before surgery or contrast imaging in some people."),
]
REFINED = "Adults usually start metformin at 500 mg daily with meals."


@pytest.fixture
def flow(tmp_path: Path) -> Iterator[tuple[Path, ScriptedProvider]]:
    """A KB for the demo answer and ``fake:fcflow``: the scripted flow model, plus plain
    replies for the two Self-Refine stages."""
    fm = pytest.importorskip("medverify.testing.factcheck_model",
                             reason="medverify.testing.factcheck_model is not written yet")
    base = fm.factcheck_model()

    def reply(request: ChatRequest) -> str:
        stage = fm.prompt_stage(request)
        if stage == "selfrefine_feedback":
            return "The starting dose of 5000 mg is ten times too high."
        if stage == "selfrefine_refine":
            return REFINED
        return str(base(request))

    with KnowledgeBase.create(tmp_path / "flow-kb", embedder="hash") as kb:
        kb.ingest(FLOW_DOCS)
    provider = register_fake("fcflow", ScriptedProvider(reply))
    yield tmp_path / "flow-kb", provider
    unregister_fake("fcflow")


def test_question_and_model_generate_check_trace_and_baseline(
        flow: tuple[Path, ScriptedProvider], tmp_path: Path) -> None:
    from medverify.testing.factcheck_model import DEMO_QUESTION

    kb_dir, provider = flow
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    result = _invoke("factcheck", "--kb", str(kb_dir), "-q", DEMO_QUESTION, "-m", "fake:fcflow",
                     "--trace", "llm", "--baseline", "selfrefine", "--json", str(out_json),
                     "--html", str(out_html))
    assert result.exit_code == 0, result.output
    assert "offline" not in result.output
    report = FactCheckReport.model_validate_json(out_json.read_text("utf-8"))
    assert report.rag is not None and report.rag.chunks  # the answer was generated first
    assert "5000 mg" in report.initial_answer and "5000 mg" not in report.final_answer
    assert "asthma" not in report.final_answer and report.final_mode == "llm"
    assert report.tokens.initial_answer_tokens and report.tokens.ratio is not None
    assert "trace" in report.tokens.per_stage and "answer" not in report.tokens.per_stage
    traced = [f.trace for f in report.facts if f.trace and f.trace.best_passage_id]
    assert traced and all(t.method == "llm" and t.reasoning for t in traced)
    assert any(s.url == "https://example.org/metformin" for s in report.sentences)
    baseline = SelfRefineResult.model_validate_json(
        baseline_path(out_json).read_text("utf-8"))
    assert baseline.refined == REFINED and baseline.initial_answer == report.initial_answer
    assert "Self-Refine baseline" in result.output and REFINED in result.output
    page = out_html.read_text("utf-8")
    assert "<del>5000</del>" in page and "LLM rewrite" in page
    assert "scripted: the passage sharing the most words" in page
    assert all(r.temperature == 0.0 for r in provider.requests)


def test_a_failed_generation_exits_1(flow: tuple[Path, ScriptedProvider]) -> None:
    kb_dir, _ = flow

    def refuse(request: ChatRequest) -> str:
        raise ProviderError("bad request", status=400)

    register_fake("fcflow", ScriptedProvider(refuse))
    result = _invoke("factcheck", "--kb", str(kb_dir), "-q", "Metformin dose?", "-m",
                     "fake:fcflow", "--no-record")
    assert result.exit_code == 1 and "the answer could not be generated" in result.output
