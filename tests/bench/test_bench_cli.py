"""``medverify bench`` end to end, in-process: question import and generation, a small study
of two scripted citing models against a local page server (judged by a scripted LLM judge),
report recomputation and the blinded label round trip."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from medverify.audit.records import AnswerAudit
from medverify.bench.agreement import CSV_COLUMNS, PairSample
from medverify.bench.questions import write_questions
from medverify.bench.records import BenchSummary, GeneratedQuestion, GenerationStatus, Question
from medverify.cli import main
from medverify.llm.base import ChatRequest
from medverify.testing import (
    CitingModel,
    PageServer,
    ScriptedProvider,
    register_fake,
    study_documents,
    study_questions,
    unregister_fake,
)
from medverify.testing.citers import last_user_text, references_for
from medverify.testing.judge import Decision, scripted_judge

WIDE = {"COLUMNS": "200"}  # rich tables at full width, whatever the terminal
WORD = re.compile(r"[a-z0-9]{3,}")
N_QUESTIONS = 4


def _bench(*args: str) -> Result:
    return CliRunner(env=WIDE).invoke(main, ["bench", *args], catch_exceptions=False)


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text("utf-8").splitlines() if line.strip()]


def _questions(path: Path) -> list[Question]:
    return [Question.model_validate_json(line) for line in _lines(path)]


def _table_row(text: str, first_cell: str) -> list[str]:
    """The cells of the rich table row whose first cell is ``first_cell``."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no table row {first_cell!r} in:\n{text}")


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    """Fast settings: rule-based statements, hash embedder, no request cache (so provider
    call counts show what a rerun really asks), few bootstrap samples and permutations."""
    path = tmp_path / "config.toml"
    path.write_text('decomposer = "rules"\n[kb_settings]\nembedder = "hash"\n'
                    "[llm]\ncache = false\n[audit]\nbootstrap = 100\n"
                    "[bench]\npermutations = 100\n", "utf-8")
    return path


# -- questions import -------------------------------------------------------------------

JSONL_ROWS = [
    {"id": "j1", "question": "What causes migraine?", "source": "forum"},
    {"id": "j2", "question": "what  causes MIGRAINE?", "source": "forum"},  # duplicate
    {"id": "j3", "question": "", "source": "forum"},  # no text
    {"id": "j4", "question": "Is ibuprofen safe in pregnancy?", "source": "forum"},
]
CSV_BYTES = (b"id,question,source\r\n"
             b"c1,Does caf\xe9 coffee raise blood pressure?,clinic\r\n"  # cp1252 e-acute
             b"c2,How long does flu last?,clinic\r\n"
             b"c3,,clinic\r\n"
             b"c4,How long does flu last?,clinic\r\n")


@pytest.fixture
def question_files(tmp_path: Path) -> tuple[Path, Path]:
    jsonl = tmp_path / "forum.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in JSONL_ROWS) + "not json\n", "utf-8")
    table = tmp_path / "clinic.csv"
    table.write_bytes(CSV_BYTES)
    return jsonl, table


def test_import_counts_every_row(question_files: tuple[Path, Path], tmp_path: Path) -> None:
    jsonl, table = question_files
    out = tmp_path / "questions.jsonl"
    result = _bench("questions", "import", str(jsonl), str(table), "--out", str(out))
    assert result.exit_code == 0, result.output
    questions = _questions(out)
    assert [(q.id, q.source) for q in questions] == [
        ("j1", "forum"), ("j4", "forum"), ("c1", "clinic"), ("c2", "clinic")]
    assert questions[2].text == "Does café coffee raise blood pressure?"
    # file, format, encoding, read, kept, duplicates, no text, unreadable
    assert _table_row(result.stdout, str(jsonl))[3:] == ["5", "2", "1", "1", "1"]
    clinic = _table_row(result.stdout, str(table))
    assert "cp1252" in clinic[2] and clinic[3:] == ["4", "2", "1", "1", "0"]
    assert "questions per source: forum 2, clinic 2" in result.stdout
    for problem in ("forum.jsonl line 2: duplicate", "forum.jsonl line 3: no question text",
                    "forum.jsonl line 5: invalid JSON", "not valid UTF-8",
                    "wrote 4 questions"):
        assert problem in result.stderr


def test_import_samples_per_source(question_files: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "sample.jsonl"
    args = ["questions", "import", *map(str, question_files), "--out", str(out),
            "--per-source", "1"]
    result = _bench(*args)
    assert result.exit_code == 0, result.output
    chosen = _questions(out)
    assert sorted(q.source for q in chosen) == ["clinic", "forum"]
    assert {q.id for q in chosen} <= {"j1", "j4", "c1", "c2"}
    assert "questions per source: forum 1, clinic 1" in result.stdout
    assert _bench(*args).exit_code == 0 and _questions(out) == chosen  # same seed, same sample


def test_import_missing_file_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    result = _bench("questions", "import", str(missing), "--out", str(tmp_path / "q.jsonl"))
    assert result.exit_code == 2
    assert f"no such file or directory: {missing}" in result.stderr
    assert not (tmp_path / "q.jsonl").exists()


# -- questions generate -----------------------------------------------------------------

LEAFLETS = {
    "asthma": "Asthma is a common lung condition that causes breathlessness and wheezing. "
              "Reliever inhalers open the airways quickly.",
    "gout": "Gout is a type of arthritis that causes sudden, severe joint pain, often in the "
            "big toe. It happens when uric acid builds up in the blood.",
    "acne": "Acne is a skin condition that causes spots, mainly on the face, back and chest. "
            "Creams with benzoyl peroxide can help.",
}


class QuestionWriter:
    """Writes a question naming the leaflet in the prompt; garbage for gout the first time."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, request: ChatRequest) -> str:
        prompt = last_user_text(request)
        topic = next(t for t in LEAFLETS if f"| {t}" in prompt)
        self.asked.append(topic)
        if topic == "gout" and self.asked.count("gout") == 1:
            return "Sure! Here is a good question about gout."
        return json.dumps({"question": f"What should I know about {topic}?"})


@pytest.fixture
def generator() -> Iterator[tuple[ScriptedProvider, QuestionWriter]]:
    writer = QuestionWriter()
    provider = register_fake("cli-qgen", ScriptedProvider(writer, name="cli-qgen"))
    yield provider, writer
    unregister_fake("cli-qgen")


def test_generate_then_retry_only_failed_document(
        tmp_path: Path, config_file: Path,
        generator: tuple[ScriptedProvider, QuestionWriter]) -> None:
    provider, writer = generator
    docs = tmp_path / "leaflets"
    docs.mkdir()
    for name, text in LEAFLETS.items():
        (docs / f"{name}.txt").write_text(text, "utf-8")
    out = tmp_path / "generated.jsonl"
    log = tmp_path / "generated.jsonl.generation.jsonl"
    args = ["questions", "generate", str(docs), "--model", "fake:cli-qgen", "--source",
            "leaflets", "--out", str(out), "--config", str(config_file)]

    first = _bench(*args)
    assert first.exit_code == 0, first.output
    assert "invalid 1, ok 2" in first.stderr and "wrote 2 questions" in first.stderr
    assert sorted(writer.asked) == ["acne", "asthma", "gout"]
    made = _questions(out)
    assert [q.text for q in made] == ["What should I know about acne?",
                                      "What should I know about asthma?"]
    assert all(q.source == "leaflets" and q.reference is not None for q in made)
    assert made[0].reference is not None and "benzoyl peroxide" in made[0].reference.text
    logged = [GeneratedQuestion.model_validate_json(line) for line in _lines(log)]
    failed = [g for g in logged if g.status == GenerationStatus.INVALID]
    assert len(logged) == 3 and len(failed) == 1
    assert failed[0].doc_id.endswith("gout.txt") and "Sure!" in (failed[0].raw_output or "")

    calls = len(provider.requests)
    again = _bench(*args)
    assert again.exit_code == 0, again.output
    assert len(provider.requests) == calls + 1 and writer.asked[-1] == "gout"
    assert "ok 3" in again.stderr
    assert [q.text for q in _questions(out)] == [f"What should I know about {t}?"
                                                 for t in ("acne", "asthma", "gout")]
    assert len(_lines(log)) == 4


# -- bench run, report, labels ------------------------------------------------------------


def overlap_rule(claim: str, passages: dict[str, str]) -> Decision:
    """Supported when at least 80 % of the claim's words occur in its passages."""
    words = set(WORD.findall(claim.casefold()))
    seen = set(WORD.findall(" ".join(passages.values()).casefold()))
    return (bool(words) and len(words & seen) >= 0.8 * len(words), False)


@dataclass
class Study:
    questions: Path
    run: Path
    config: Path
    store: Path
    pages: PageServer
    providers: dict[str, ScriptedProvider]

    def run_args(self, *extra: str,
                 judge: tuple[str, ...] = ("--judge", "llm", "--judge-model", "fake:cli-judge")
                 ) -> list[str]:
        return ["run", "--models", "m-careful=fake:cli-careful,m-halluc=fake:cli-halluc",
                "--questions", str(self.questions), "--out", str(self.run),
                "--allow", self.pages.host_port, *judge, "--config", str(self.config),
                "--store", str(self.store), *extra]

    def calls(self) -> int:
        return sum(len(p.requests) for p in self.providers.values())


@pytest.fixture
def study(tmp_path: Path, config_file: Path) -> Iterator[Study]:
    chosen = study_questions()[:N_QUESTIONS]
    questions = tmp_path / "study.jsonl"
    write_questions(questions, chosen)
    references = references_for(chosen)
    with PageServer.from_documents(study_documents()) as pages:
        providers = {
            "cli-careful": ScriptedProvider(CitingModel("careful", references, pages.url_for),
                                            name="cli-careful"),
            "cli-halluc": ScriptedProvider(
                CitingModel("hallucinating", references, pages.url_for), name="cli-halluc"),
            "cli-judge": ScriptedProvider(scripted_judge(overlap_rule), name="cli-judge"),
        }
        for name, provider in providers.items():
            register_fake(name, provider)
        try:
            yield Study(questions, tmp_path / "run", config_file, tmp_path / "runs.db",
                        pages, providers)
        finally:
            for name in providers:
                unregister_fake(name)


def _summary(run: Path) -> BenchSummary:
    return BenchSummary.model_validate_json((run / "summary.json").read_text("utf-8"))


def _run_study(study: Study) -> Result:
    result = _bench(*study.run_args())
    assert result.exit_code == 0, result.output
    return result


def test_run_writes_the_study_and_resumes_for_free(study: Study) -> None:
    result = _run_study(study)
    for label in ("m-careful", "m-halluc"):
        assert _table_row(result.stdout, label)[1] == str(N_QUESTIONS)
        assert len(study.providers["cli-" + label[2:]].requests) == N_QUESTIONS
    assert study.providers["cli-judge"].requests
    # the stderr console wraps at 80 columns; a long tmp path (xdist's popen-gwN/) would split
    assert f"report: {study.run / 'report.html'}" in result.stderr.replace("\n", "")
    assert (study.run / "report.html").stat().st_size > 1000
    exports = {p.name for p in (study.run / "exports").glob("*.csv")}
    assert {"metrics.csv", "replies.csv", "claims.csv", "pairs.csv"} <= exports
    summary = _summary(study.run)
    assert [m.label for m in summary.models] == ["m-careful", "m-halluc"]
    assert summary.overall["m-careful"].url_validity.value == pytest.approx(1.0)
    assert summary.overall["m-halluc"].url_validity.value == pytest.approx(0.0)
    assert (summary.overall["m-careful"].statement_support.value or 0) > 0.5
    assert study.pages.hits  # the cited pages were really fetched
    replies = _lines(study.run / "replies.jsonl")
    assert len(replies) == 2 * N_QUESTIONS

    calls = study.calls()
    again = _bench(*study.run_args())
    assert again.exit_code == 0, again.output
    assert study.calls() == calls  # nothing asked, nothing judged again
    assert _lines(study.run / "replies.jsonl") == replies
    assert _summary(study.run).overall["m-careful"] == summary.overall["m-careful"]
    assert "m-halluc" in again.stdout


@pytest.mark.slow
def test_run_with_the_builtin_judge(study: Study) -> None:
    """The default judge (the shipped verifier model; about 10 s on 2 CPU cores)."""
    result = _bench(*study.run_args(judge=("--judge", "builtin")))
    assert result.exit_code == 0, result.output
    summary = _summary(study.run)
    assert summary.judge.startswith("builtin") and "cli-judge" not in summary.judge
    assert not study.providers["cli-judge"].requests
    careful = summary.overall["m-careful"]
    assert careful.url_validity.value == pytest.approx(1.0)
    assert careful.n_pairs > 0 and careful.n_pair_errors == 0
    assert careful.statement_support.value is not None


def test_run_refuses_bad_arguments(study: Study, tmp_path: Path) -> None:
    args = study.run_args()
    models = args.index("--models") + 1
    args[models] = "same=fake:cli-careful,same=fake:cli-halluc"
    result = _bench(*args)
    assert result.exit_code == 2
    assert "model labels must be unique; repeated: same" in result.stderr
    assert study.calls() == 0 and not (study.run / "run.json").exists()

    args = study.run_args()
    args[args.index("--questions") + 1] = str(tmp_path / "missing.jsonl")
    missing = _bench(*args)
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    assert study.calls() == 0


def test_report_recomputes_without_calling_a_model(study: Study, tmp_path: Path) -> None:
    _run_study(study)
    before = _summary(study.run)
    for name in ("summary.json", "report.html"):
        (study.run / name).unlink()
    calls = study.calls()
    result = _bench("report", str(study.run))  # the settings recorded in run.json
    assert result.exit_code == 0, result.output
    assert study.calls() == calls
    assert (study.run / "report.html").is_file() and (study.run / "summary.json").is_file()
    after = _summary(study.run)
    assert after.notes["statistics"] == {"bootstrap": 100, "permutations": 100, "seed": 0}
    assert after.overall == before.overall and after.comparisons == before.comparisons
    assert "m-careful" in result.stdout and "m-halluc" in result.stdout

    other = tmp_path / "other.toml"
    other.write_text("[audit]\nbootstrap = 50\nseed = 3\n[bench]\npermutations = 200\n",
                     "utf-8")
    assert _bench("report", str(study.run), "--config", str(other)).exit_code == 0
    assert _summary(study.run).notes["statistics"] == {"bootstrap": 50, "permutations": 200,
                                                       "seed": 3}

    elsewhere = tmp_path / "not-a-run"
    elsewhere.mkdir()
    for args in (["report", str(elsewhere)], ["labels", "export", str(elsewhere)]):
        refused = _bench(*args)
        assert refused.exit_code == 2
        assert "is not a benchmark run directory" in refused.stderr


def test_blinded_labels_round_trip(study: Study, tmp_path: Path) -> None:
    _run_study(study)
    assert 'id="table-agreement"' not in (study.run / "report.html").read_text("utf-8")
    exported = _bench("labels", "export", str(study.run), "--n", "4")
    assert exported.exit_code == 0, exported.output
    sheet = study.run / "labels" / "sample-0-4.csv"
    key = study.run / "labels" / "key-0-4.jsonl"
    flat = exported.stderr.replace("\n", "")  # the stderr console wraps long paths
    assert str(sheet) in flat and str(key) in flat
    text = sheet.read_text("utf-8-sig")
    for hidden in ("m-careful", "m-halluc", "cli-", "judge"):
        assert hidden not in text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == list(CSV_COLUMNS) and len(rows) == 4
    assert all(r["label"] == "" and r["statement"] and r["source_url"] for r in rows)

    verdicts = {s.pair_id: s.judge_supported
                for s in map(PairSample.model_validate_json, _lines(key))}
    assert set(verdicts) == {r["pair_id"] for r in rows}
    for i, row in enumerate(rows):  # agree with the judge on three pairs of four
        agree = verdicts[row["pair_id"]] if i else not verdicts[row["pair_id"]]
        row["label"] = "supported" if agree else "not supported"
    filled = tmp_path / "filled.csv"
    with filled.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)

    imported = _bench("labels", "import", str(study.run), str(filled), "--annotator", "d1")
    assert imported.exit_code == 0, imported.output
    assert '"annotator": "d1"' in imported.stderr and '"imported": 4' in imported.stderr
    overall = _table_row(imported.stdout, "all")
    assert overall[1] == "4" and overall[2].startswith("75.0%")

    report = _bench("report", str(study.run))
    assert report.exit_code == 0, report.output
    agreement = _summary(study.run).agreement
    assert agreement is not None and agreement.n == 4
    assert agreement.agreement.value == pytest.approx(0.75)
    html = (study.run / "report.html").read_text("utf-8")
    assert 'id="table-agreement"' in html and "Judge agreement with human labels" in html
    assert _table_row(report.stdout, "all")[1] == "4"


def test_any_annotation_file_is_matched_to_the_run_pairs(study: Study, tmp_path: Path) -> None:
    from medverify.bench.agreement import scored_pairs

    _run_study(study)
    audits = [AnswerAudit.model_validate_json(line)
              for line in _lines(study.run / "audit" / "answers.jsonl")]
    pairs = [p for p in scored_pairs(audits) if p.source_url][:3]
    assert len(pairs) == 3
    sheet = tmp_path / "annotations.csv"
    with sheet.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["answer_id", "statement", "source_url", "label"])
        for pair in pairs:
            writer.writerow([pair.answer_id, pair.statement, pair.source_url,
                             "yes" if pair.judge_supported else "no"])
        writer.writerow(["nobody::q", "A statement nobody made.", "https://x.org", "yes"])
    imported = _bench("labels", "import", str(study.run), str(sheet), "--annotator", "d2")
    assert imported.exit_code == 0, imported.output
    assert '"imported": 3' in imported.stderr and '"unknown_pairs": 1' in imported.stderr
    assert _table_row(imported.stdout, "all")[1] == "3"


def test_error_causes_are_grouped_once_each() -> None:
    from medverify.cli.bench_tables import error_cause_lines

    errors = [f"m1 / q{i}: provider call failed: 429 after 5 attempts" for i in range(7)]
    errors += ["a-1: fetch cache unreadable", "plain cause without a place"]
    lines = error_cause_lines(errors)
    assert lines[0] == "errors (9; all in summary.json):"
    assert lines[1] == "  7 × provider call failed: 429 after 5 attempts (first: m1 / q0)"
    assert "  fetch cache unreadable (first: a-1)" in lines
    assert "  plain cause without a place" in lines
    assert error_cause_lines([]) == []
