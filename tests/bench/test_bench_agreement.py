"""Judge agreement with human labels: sampling, blinded export, label import, scores."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from medverify.audit.cited_urls import extract_sources
from medverify.audit.evaluate import cohen_kappa
from medverify.audit.metrics import audit_metrics, group_audits
from medverify.audit.records import AnswerAudit, AuditInput, ClaimAudit, PairJudgement
from medverify.audit.runner import Auditor
from medverify.bench.agreement import (
    CSV_COLUMNS,
    HumanLabel,
    PairSample,
    agreement_details,
    defuse_cell,
    export_blinded,
    import_annotations,
    import_labels,
    load_agreement,
    load_keys,
    parse_label,
    sample_pairs,
    scored_pairs,
)
from medverify.bench.layout import RunLayout
from medverify.bench.records import Question
from medverify.config import Config
from medverify.errors import InputError
from medverify.files import read_records
from medverify.kb.embed_base import HashEmbedder
from medverify.kit import FlowKit
from medverify.llm.base import ChatRequest, Message
from medverify.records import Analysis, Answer, Claim, Passage, Source, Verdict
from medverify.testing import CitingModel, PageServer, study_documents, study_questions
from medverify.testing.citers import REFUSAL, references_for
from medverify.testing.judge import WordJudge

MODELS = ("alpha", "beta")


def verdict(claim_id: str, supported: bool | None) -> Verdict:
    if supported is None:
        return Verdict(claim_id=claim_id, error="judge timed out")
    return Verdict(claim_id=claim_id, factual=Analysis(holds=supported),
                   counterfactual=Analysis(holds=False))


def audit(model: str, number: int) -> AnswerAudit:
    """One answer with two valid sources, one invalid source and three claims; verdicts
    vary with the claim and model so both verdicts occur for each model."""
    sources = [Source(id="1", url=f"https://example.org/{number}/one", status="fetched",
                      text=f"Page one of question {number}. " * 20),
               Source(id="2", url=f"https://example.org/{number}/two", status="fetched",
                      text="Page two."),
               Source(id="3", url="https://dead.example/", status="invalid")]
    texts = [f"Statement {number} a.", f"=SUM({number}) looks like a formula",
             f"-{number} mg is a dose"]
    claims = []
    for index, text in enumerate(texts):
        claim_id = f"c{index}"
        pairs = [PairJudgement(claim_id=claim_id, source_id=sid,
                               passages=[Passage(id=f"{sid}#{k}", doc_id=sid,
                                                 text=f"passage {k} of {sid}")
                                         for k in range(2 if sid == "1" else 0)],
                               verdict=verdict(claim_id, (number + index + len(model) + k) % 3
                                               == 0))
                 for k, sid in enumerate(["1", "2"])]
        pairs.append(PairJudgement(claim_id=claim_id, source_id="3",
                                   verdict=verdict(claim_id, False)))
        if index == 0 and number == 0:
            pairs[1] = PairJudgement(claim_id=claim_id, source_id="2",
                                     verdict=verdict(claim_id, None))
        claims.append(ClaimAudit(claim=Claim(id=claim_id, text=text), pairs=pairs))
    answer = Answer(id=f"{model}::q{number}", question=f"Question {number}?", text=" ".join(texts),
                    sources=sources, meta={"model": model, "question_source": "generated"})
    return AnswerAudit(answer=answer, claims=claims)


@pytest.fixture
def audits() -> list[AnswerAudit]:
    return [audit(model, number) for model in MODELS for number in range(5)]


@pytest.fixture
def layout(tmp_path: Path) -> RunLayout:
    return RunLayout(tmp_path / "run")


def read_csv(path: Path) -> list[dict[str, str]]:
    raw = path.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")
    return list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"), newline="")))


def write_csv(path: Path, rows: list[dict[str, str]], *, delimiter: str = ",",
              encoding: str = "utf-8-sig") -> Path:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), delimiter=delimiter)
    writer.writeheader()
    writer.writerows(rows)
    path.write_bytes(buffer.getvalue().encode(encoding))
    return path


# --- sampling ----------------------------------------------------------------------------


def test_scored_pairs_skip_failed_verdicts_and_invalid_sources(audits: list[AnswerAudit]) -> None:
    pairs = scored_pairs(audits)
    assert len(pairs) == 10 * 3 * 2 - 2  # 10 answers x 3 claims x 2 valid sources - 2 errors
    assert {p.source_id for p in pairs} == {"1", "2"}
    assert len({p.pair_id for p in pairs}) == len(pairs)
    first = next(p for p in pairs if p.source_id == "1")
    assert first.source_excerpt == "passage 0 of 1\n[...]\npassage 1 of 1"
    second = next(p for p in pairs if p.source_id == "2")
    assert second.source_excerpt == "Page two."  # no passages: the start of the source


def test_sample_is_deterministic_and_stratified(audits: list[AnswerAudit]) -> None:
    sample = sample_pairs(audits, 8, seed=3)
    assert sample == sample_pairs(audits, 8, seed=3)
    assert sample != sample_pairs(audits, 8, seed=4)
    strata = {(p.model, p.judge_supported) for p in sample}
    assert strata == {(m, v) for m in MODELS for v in (True, False)}
    assert sum(p.judge_supported for p in sample) == 4
    assert len(sample_pairs(audits, 1000)) == 58
    assert len(sample_pairs(audits, 5, stratify=False, seed=1)) == 5
    with pytest.raises(InputError, match="at least 1"):
        sample_pairs(audits, 0)


# --- export ------------------------------------------------------------------------------


def test_export_is_blinded_shuffled_and_defused(audits: list[AnswerAudit],
                                                layout: RunLayout) -> None:
    csv_path, key_path = export_blinded(layout, audits, 20, seed=7)
    assert csv_path == layout.labels / "sample-7-20.csv"
    assert key_path == layout.labels / "key-7-20.jsonl"
    rows = read_csv(csv_path)
    keys = read_records(key_path, PairSample)
    assert tuple(rows[0]) == CSV_COLUMNS and len(rows) == len(keys) == 20
    assert {r["pair_id"] for r in rows} == {k.pair_id for k in keys}
    assert [r["pair_id"] for r in rows] != [k.pair_id for k in keys]
    text = csv_path.read_text("utf-8-sig")
    assert not any(word in text for word in ("alpha", "beta", "FACT", "COVERAGE_GAP", "::q"))
    assert all(r["label"] == r["notes"] == "" for r in rows)
    statements = {r["statement"] for r in rows}
    assert any(s.startswith("'=SUM(") for s in statements)
    assert any(s.startswith("'-") and s.endswith("mg is a dose") for s in statements)
    assert not any(s[0] in "=+-@" for s in statements)
    # Exporting the same sample again is harmless; over a filled file it refuses.
    assert export_blinded(layout, audits, 20, seed=7) == (csv_path, key_path)
    csv_path.write_text(text + "extra\n", "utf-8-sig")
    with pytest.raises(InputError, match="already exists"):
        export_blinded(layout, audits, 20, seed=7)


def test_defuse_cell_and_parse_label() -> None:
    assert [defuse_cell(c) for c in ("=1+1", "+x", "-3", "@SUM(A1)", "\tx", "ok", "")] == \
        ["'=1+1", "'+x", "'-3", "'@SUM(A1)", "'\tx", "ok", ""]
    for raw in ("Supported", "yes", "1", "TRUE", "s", " 'supported "):
        assert parse_label(raw) is True
    for raw in ("not supported", "Not  Supported", "unsupported", "No", "0", "false", "N"):
        assert parse_label(raw) is False
    for raw in ("", "unsure", "?", " Unsure "):
        assert parse_label(raw) is None
    with pytest.raises(ValueError, match="maybe"):
        parse_label("maybe")


# --- import and agreement ----------------------------------------------------------------


def test_round_trip_counts_labels_and_scores_kappa(audits: list[AnswerAudit],
                                                   layout: RunLayout) -> None:
    csv_path, _ = export_blinded(layout, audits, 16, seed=1)
    rows = read_csv(csv_path)
    key = load_keys(layout)
    spellings = {True: ["supported", "Yes", "1", "S"], False: ["not supported", "no", "0", "N"]}
    human: dict[str, bool] = {}
    for index, row in enumerate(rows[:12]):
        truth = key[row["pair_id"]].judge_supported != (index % 4 == 0)  # every 4th disagrees
        row["label"] = spellings[truth][index % 4]
        human[row["pair_id"]] = truth
    rows[12]["label"] = "unsure"
    rows[13]["label"] = ""
    rows[14]["label"] = "maybe"
    rows[15]["pair_id"] = "p000000000000"
    rows[15]["label"] = "yes"
    duplicate = dict(rows[0], label="no" if human[rows[0]["pair_id"]] else "yes")
    human[rows[0]["pair_id"]] = not human[rows[0]["pair_id"]]
    filled = write_csv(layout.root / "filled.csv", [*rows, duplicate])

    report = import_labels(layout, filled, annotator="dr-a")
    assert (report.rows, report.imported, report.skipped, report.unrecognized,
            report.unknown_pairs, report.duplicates) == (17, 12, 2, 1, 1, 1)
    assert report.supported == sum(human.values())
    assert any("maybe" in p for p in report.problems)
    stored = read_records(layout.labels / "labels.jsonl", HumanLabel)
    assert {(label.pair_id, label.supported) for label in stored} == set(human.items())

    overall, by_model = load_agreement(layout, audits, n_boot=200, seed=0)
    assert overall is not None and overall.n == 12
    codes = np.asarray([2 * human[p] + key[p].judge_supported for p in sorted(human)], float)
    assert overall.kappa.value == pytest.approx(cohen_kappa(codes))
    assert overall.agreement.value == pytest.approx(np.mean([c in (0, 3) for c in codes]))
    assert overall.kappa.ci is not None or overall.kappa.value is None
    assert set(by_model) <= set(MODELS) and sum(s.n for s in by_model.values()) == 12
    for model, scores in by_model.items():
        mine = sorted(p for p in human if key[p].model == model)
        model_codes = np.asarray([2 * human[p] + key[p].judge_supported for p in mine], float)
        assert scores.n == len(mine)
        assert scores.confusion["SUPPORTED"]["SUPPORTED"] == int(np.sum(model_codes == 3))


def test_majority_over_annotators_with_ties_and_inter_annotator(
        audits: list[AnswerAudit], layout: RunLayout) -> None:
    csv_path, _ = export_blinded(layout, audits, 6, seed=2)
    rows = read_csv(csv_path)
    first = [dict(r, label="yes") for r in rows]
    second = [dict(r, label="yes" if i < 4 else "no") for i, r in enumerate(rows)]
    import_labels(layout, write_csv(layout.root / "a.csv", first), annotator="a")
    import_labels(layout, write_csv(layout.root / "b.csv", second), annotator="b")
    import_labels(layout, write_csv(layout.root / "a.csv", first), annotator="a")  # again
    details = agreement_details(layout, audits, n_boot=100)
    assert (details.n_annotators, details.n_pairs, details.n_ties) == (2, 6, 2)
    assert details.overall is not None
    assert details.overall.n == 4 and details.overall.n_unscored == 2
    assert details.overall.gold_supported_rate == 1.0
    pair_scores = details.inter_annotator["a vs b"]
    assert pair_scores.n == 6 and pair_scores.agreement.value == pytest.approx(4 / 6)


def test_labels_for_pairs_no_longer_scored_are_unmatched(audits: list[AnswerAudit],
                                                         layout: RunLayout) -> None:
    csv_path, _ = export_blinded(layout, audits, 4, seed=0)
    rows = [dict(r, label="no") for r in read_csv(csv_path)]
    import_labels(layout, write_csv(layout.root / "x.csv", rows), annotator="x")
    alpha_only = [a for a in audits if a.answer.meta["model"] == "alpha"]
    details = agreement_details(layout, alpha_only, n_boot=50)
    assert details.overall is not None
    assert details.overall.n + details.n_unmatched == 4 and details.n_unmatched == 2
    assert set(details.by_model) == {"alpha"}


def test_excel_semicolon_cp1252_file_imports(audits: list[AnswerAudit],
                                             layout: RunLayout) -> None:
    csv_path, _ = export_blinded(layout, audits, 3, seed=0)
    rows = [{"pair_id": r["pair_id"], "label": "Not supported", "notes": "café"}
            for r in read_csv(csv_path)]
    path = write_csv(layout.root / "excel.csv", rows, delimiter=";", encoding="cp1252")
    report = import_labels(layout, path)
    assert (report.imported, report.not_supported, report.encoding) == (3, 3, "windows-1252")
    assert report.annotator == "excel"
    stored = read_records(layout.labels / "labels.jsonl", HumanLabel)
    assert {label.notes for label in stored} == {"café"}


def test_import_needs_a_key_and_the_columns(audits: list[AnswerAudit], layout: RunLayout,
                                            tmp_path: Path) -> None:
    path = write_csv(tmp_path / "f.csv", [{"pair_id": "p1", "label": "yes"}])
    with pytest.raises(InputError, match="export a blinded sample"):
        import_labels(layout, path)
    export_blinded(layout, audits, 2)
    with pytest.raises(InputError, match="no column label"):
        import_labels(layout, write_csv(tmp_path / "g.csv", [{"pair_id": "p1", "verdict": "y"}]))
    assert load_agreement(RunLayout(tmp_path / "empty"), audits) == (None, {})


def test_import_annotations_by_question_statement_and_url(audits: list[AnswerAudit],
                                                          layout: RunLayout,
                                                          tmp_path: Path) -> None:
    rows = [
        {"question": "question 1?", "statement": "statement  1 A.",
         "source_url": "HTTPS://Example.org/1/one", "label": "supported"},
        {"question": "Question 1?", "statement": "'-1 mg is a dose",
         "source_url": "https://example.org/1/two", "label": "no"},
        {"question": "Question 1?", "statement": "never said",
         "source_url": "https://example.org/1/two", "label": "no"},
    ]
    report = import_annotations(layout, write_csv(tmp_path / "ann.csv", rows), audits,
                                annotator="nurse")
    assert (report.rows, report.imported, report.unknown_pairs) == (3, 4, 1)  # 2 models each
    labels = read_records(layout.labels / "labels.jsonl", HumanLabel)
    assert len({label.pair_id for label in labels}) == 4
    by_id = [{"answer_id": "beta::q2", "statement": "Statement 2 a.",
              "source_url": "https://example.org/2/two", "label": "1"}]
    assert import_annotations(layout, write_csv(tmp_path / "b.csv", by_id), audits).imported == 1
    overall, _ = load_agreement(layout, audits, n_boot=50)
    assert overall is not None and overall.n == 5


# --- end to end: citing models, their pages, a real audit --------------------------------


def _reply_input(label: str, question: Question, raw: str) -> AuditInput | None:
    """A crude stand-in for the bench runner's reply parsing."""
    try:
        data = json.loads(raw)
        text = data["answer"]
        urls = list(dict.fromkeys(s["url"] for s in data["sources"]))
        sources = [Source(id=str(i), url=u) for i, u in enumerate(urls, 1)]
    except (json.JSONDecodeError, TypeError, KeyError):
        text, sources = raw, extract_sources(raw)
    if not text.strip() or text == REFUSAL:
        return None
    answer = Answer(id=f"{label}::{question.id}", question=question.text, text=text,
                    sources=sources, meta={"model": label, "question_source": question.source})
    return AuditInput(answer=answer)


def test_agreement_on_a_real_audit_of_the_citing_models(tmp_path: Path) -> None:
    questions = study_questions()
    inputs: list[AuditInput] = []
    with PageServer.from_documents(study_documents()) as pages:
        for habit in ("careful", "hallucinating", "unreliable"):
            model = CitingModel(habit, references_for(questions), pages.url_for)
            for question in questions:
                request = ChatRequest(model="m", messages=(
                    Message(role="user", content=f"Question: {question.text}"),))
                item = _reply_input(habit, question, model(request))
                inputs.extend([item] if item else [])
        config = Config.load(fetch={"allow": [pages.host_port]}, audit={"bootstrap": 50})
        auditor = Auditor.from_config(
            config, out_dir=tmp_path / "audit",
            kit=FlowKit(judge=WordJudge(), embedder=HashEmbedder(), record=False))
        audits, _ = asyncio.run(auditor.run(inputs))
        base_url = pages.base_url
    metrics = {m: audit_metrics(g, n_boot=50) for m, g in group_audits(audits, "model").items()}
    assert metrics["careful"].url_validity.value == 1.0
    assert metrics["careful"].statement_support.value == 1.0
    assert metrics["hallucinating"].url_validity.value == 0.0
    assert metrics["hallucinating"].invalid_reasons == {"http_status": 12, "dns": 12}

    layout = RunLayout(tmp_path / "run")
    csv_path, _ = export_blinded(layout, audits, 12, seed=5)
    rows = read_csv(csv_path)
    assert {r["source_url"].split("/pages/")[0] for r in rows} == {base_url}
    key = load_keys(layout)
    assert {k.model for k in key.values()} == {"careful", "unreliable"}  # valid sources only
    filled = [dict(r, label="no" if i == 0 else "yes") for i, r in enumerate(rows)]
    import_labels(layout, write_csv(tmp_path / "filled.csv", filled), annotator="dr")
    overall, by_model = load_agreement(layout, audits, n_boot=50)
    assert overall is not None and overall.n == len(rows)
    assert sum(s.n for s in by_model.values()) == len(rows)
