from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import medverify.demo as demo
import medverify.judge.builtin as builtin
from medverify.cli import main
from medverify.config import KBSettings
from medverify.demo import demo_answers, expectations, run_demo
from medverify.judge.builtin import BuiltinJudge
from medverify.kb import sample_kb_path
from medverify.records import Category
from medverify.testing.verifier import LexicalVerifier

# the sample documents the demo answers were written against, plus two bystanders
TOPICS = {"Shingles", "Gout", "Hypothyroidism", "Rabies", "Yellow Fever Vaccination",
          "Parasites - Enterobiasis (also known as Pinworm Infection)", "Itching", "Vitiligo"}


@pytest.fixture
def small_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A slice of the shipped sample, so the test builds its KB in about a second."""
    lines = sample_kb_path().read_text("utf-8").splitlines()
    keep = [line for line in lines if json.loads(line)["title"] in TOPICS]
    path = tmp_path / "sample.jsonl"
    path.write_text("\n".join(keep) + "\n", "utf-8")
    monkeypatch.setattr(demo, "sample_kb_path", lambda: path)
    return path


def test_demo_answers_cover_every_kind_of_planted_error() -> None:
    answers = demo_answers()
    assert 5 <= len(answers) <= 8
    kinds = {e.kind for a in answers for e in expectations(a)}
    assert {"wrong population", "invented effect", "claim the KB cannot settle"} <= kinds
    assert any(k.startswith("wrong") and ("number" in k or "dose" in k) for k in kinds)
    for answer in answers:
        for expectation in expectations(answer):
            assert expectation.text in answer.text  # expectations locate their sentence
    titles = {json.loads(line)["title"] for line in sample_kb_path().read_text().splitlines()}
    assert TOPICS - {"Itching", "Vitiligo"} <= titles  # written against shipped documents


def test_demo_writes_reports_and_is_idempotent(small_sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "demo"
    options = {"judge": BuiltinJudge(LexicalVerifier()), "settings": KBSettings(embedder="hash")}
    first = run_demo(out, **options)
    assert first.kb_documents_added == len(TOPICS)
    assert first.judge == "builtin:lexical-fake"
    reports = json.loads(first.json_path.read_text("utf-8"))
    assert len(reports) == len(demo_answers())
    page = first.html_path.read_text("utf-8")
    assert "Planted" in page and "Judge agrees with plan" in page
    for answer in first.answers:
        assert (out / answer.html).is_file() and answer.html in page
        assert all(c.expected is not None for c in answer.claims)  # each claim is mapped
    assert any(c.got == Category.FACT and c.agrees for c in first.claims)

    second = run_demo(out, **options)
    assert second.kb_documents_added == 0
    assert [c.got for c in second.claims] == [c.got for c in first.claims]
    assert json.loads(second.json_path.read_text("utf-8"))[0]["answer"]["id"] == reports[0][
        "answer"
    ]["id"]


def test_cli_demo_prints_summaries_and_the_overview(
    small_sample: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(builtin, "load_verifier", lambda path=None: LexicalVerifier())
    monkeypatch.setenv("MEDVERIFY_KB_SETTINGS__EMBEDDER", "hash")
    out = tmp_path / "demo"
    result = CliRunner(env={"COLUMNS": "160"}).invoke(main, ["demo", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Planted versus judged" in result.output
    assert "Statement-level support" in result.output
    assert str(out / "report.html") in result.output.replace("\n", "")
    assert (out / "runs.db").is_file()
