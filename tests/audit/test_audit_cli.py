"""``medverify audit`` end to end: a 3-answer file with given texts, a scripted LLM judge."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from medverify.audit.records import AnswerAudit, AuditSummary
from medverify.cli import main
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge

ROWS = [
    {"id": "a1", "system": "gpt", "question": "Aspirin?",
     "answer": "Aspirin thins the blood [1]. Aspirin cures cancer [2].",
     "sources": [{"url": "https://a.org/aspirin", "marker": 1, "text": "Aspirin thins blood."},
                 {"url": "https://nowhere.example/x", "marker": 2}],
     "claims": [{"text": "Aspirin thins the blood [1].", "label": "SUPPORTED"},
                {"text": "Aspirin cures cancer [2].", "label": "NOT_SUPPORTED"}]},
    {"id": "a2", "system": "gpt", "question": "Sleep?",
     "answer": "Exercise thins stress [1].",
     "sources": [{"url": "https://b.org/sleep", "marker": 1, "text": "Exercise reduces stress."}],
     "claims": [{"text": "Exercise thins stress [1]."}]},
    {"id": "a3", "system": "claude", "question": "Colds?",
     "answer": "Vitamin C prevents colds [1].",
     "sources": [{"url": "https://c.org/colds", "marker": 1, "text": "It does not prevent colds."}],
     "claims": [{"text": "Vitamin C prevents colds [1].", "label": "NOT_SUPPORTED"}]},
]


@pytest.fixture
def fake_model() -> Iterator[ScriptedProvider]:
    provider = ScriptedProvider(scripted_judge(keyword_rule(supported="thins")), name="audit")
    register_fake("audit", provider)
    yield provider
    unregister_fake("audit")


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS), "utf-8")
    config = tmp_path / "config.toml"
    config.write_text('[kb_settings]\nembedder = "hash"\n[llm]\ncache = false\n'
                      "[audit]\nbootstrap = 100\n", "utf-8")
    return data, config


def _audit(*args: str) -> object:
    return CliRunner().invoke(main, ["audit", *args], catch_exceptions=False)


def test_audit_end_to_end(setup: tuple[Path, Path], tmp_path: Path,
                          fake_model: ScriptedProvider) -> None:
    data, config = setup
    out = tmp_path / "out"
    result = _audit(str(data), "--out", str(out), "--offline", "--judge", "llm",
                    "--model", "fake:audit", "--config", str(config))
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    text = result.output  # type: ignore[attr-defined]
    for expected in ("source URL validity", "statement-level support", "response-level support",
                     "sources supporting no statement", "pairs judged: 4", "offline 1",
                     "skipped: wayback: offline"):
        assert expected in text
    summary = AuditSummary.model_validate_json((out / "summary.json").read_text("utf-8"))
    assert summary.overall.n_answers == 3 and summary.overall.n_claims == 4
    assert summary.overall.statement_support.value == pytest.approx(0.5)
    assert summary.overall.response_support.value == pytest.approx(1 / 3)
    assert summary.judge.startswith("llm") and summary.models["judge"].startswith("llm")
    assert summary.prompt_versions["judge"].startswith("judge/")
    assert summary.pairing == "all" and summary.offline
    assert summary.usage["judge"].calls >= 1 and fake_model.requests
    lines = (out / "answers.jsonl").read_text("utf-8").splitlines()
    audits = {a.answer.id: a for a in map(AnswerAudit.model_validate_json, lines)}
    assert [c.supported for c in audits["a1"].claims] == [True, False]
    assert (out / "report.html").is_file()

    again = _audit(str(data), "--out", str(out), "--offline", "--judge", "llm",
                   "--model", "fake:audit", "--config", str(config), "--pairing", "cited")
    assert again.exit_code == 0
    resumed = AuditSummary.model_validate_json((out / "summary.json").read_text("utf-8"))
    assert resumed.notes["resumed"] == 3 and resumed.notes["audited"] == 0


def test_cited_pairing_and_limit(setup: tuple[Path, Path], tmp_path: Path,
                                 fake_model: ScriptedProvider) -> None:
    data, config = setup
    out = tmp_path / "cited"
    result = _audit(str(data), "--out", str(out), "--offline", "--pairing", "cited",
                    "--limit", "2", "--judge", "llm", "--model", "fake:audit",
                    "--config", str(config), "--no-record")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    summary = AuditSummary.model_validate_json((out / "summary.json").read_text("utf-8"))
    assert summary.pairing == "cited" and summary.overall.n_answers == 2
    assert summary.overall.n_pairs == 2  # a1's second claim cites an invalid source


def test_bad_input_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\x00\x01 not json\n{also bad\n")
    result = CliRunner().invoke(main, ["audit", str(bad), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "no answer to audit" in result.output
    missing = CliRunner().invoke(main, ["audit", str(tmp_path / "nope.jsonl"),
                                        "--out", str(tmp_path / "o")])
    assert missing.exit_code == 2 and "no such file" in missing.output


def test_llm_judge_without_model_exits_2(setup: tuple[Path, Path], tmp_path: Path) -> None:
    data, config = setup
    result = CliRunner().invoke(main, ["audit", str(data), "--out", str(tmp_path / "o"),
                                       "--judge", "llm", "--config", str(config)])
    assert result.exit_code == 2 and "needs a model" in result.output


def test_out_defaults_to_a_folder_named_after_the_input(
        setup: tuple[Path, Path], tmp_path: Path, fake_model: ScriptedProvider,
        monkeypatch: pytest.MonkeyPatch) -> None:
    data, config = setup
    monkeypatch.chdir(tmp_path)
    result = _audit(str(data), "--offline", "--limit", "1", "--judge", "llm",
                    "--model", "fake:audit", "--config", str(config), "--no-record")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert (tmp_path / "audit-answers" / "summary.json").is_file()
    assert "audit-answers" in result.output  # type: ignore[attr-defined]


# --- issue 13: an input with nothing to measure is never a measured 0 ------------------

EXPERTQA_ROWS = [
    {"id": f"e{n}", "question": "Exercise?", "field": "Medicine", "system": "gpt4",
     "answer": "Exercise thins stress [1]. It improves sleep [2].",
     "attribution": ["[1] https://example.org/stress", "[2] https://example.org/sleep"],
     "claims": [
         {"claim": "Exercise thins stress [1].", "support": "Complete",
          "evidence": ["[1] https://example.org/stress\n\nExercise reduces stress."]},
         {"claim": "It improves sleep [2].", "support": "Incomplete",
          "evidence": ["[2] https://example.org/sleep"]},
     ]}
    for n in range(3)
]


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


def test_expertqa_shaped_input_is_measured(setup: tuple[Path, Path], tmp_path: Path,
                                           fake_model: ScriptedProvider) -> None:
    _, config = setup
    data = _write(tmp_path / "expertqa.jsonl", EXPERTQA_ROWS)
    out = tmp_path / "out"
    result = _audit(str(data), "--out", str(out), "--offline", "--judge", "llm",
                    "--model", "fake:audit", "--config", str(config))
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    summary = AuditSummary.model_validate_json((out / "summary.json").read_text("utf-8"))
    assert summary.overall.n_urls == 6 and summary.overall.invalid_reasons == {"offline": 3}
    assert summary.overall.n_pairs == 6 and summary.measured
    assert summary.overall.statement_support.value == pytest.approx(0.5)
    assert summary.warnings == []


def test_no_sources_anywhere_is_not_measured_and_exits_1(
        setup: tuple[Path, Path], tmp_path: Path, fake_model: ScriptedProvider) -> None:
    _, config = setup
    rows = [{**row, "refs": row["attribution"]} for row in EXPERTQA_ROWS]
    for row in rows:
        del row["attribution"]
        row["claims"] = [{"claim": c["claim"]} for c in row["claims"]]  # type: ignore[attr-defined]
    data = _write(tmp_path / "unknown-shape.jsonl", rows)
    out = tmp_path / "out"
    result = _audit(str(data), "--out", str(out), "--offline", "--judge", "llm",
                    "--model", "fake:audit", "--config", str(config))
    text = result.output  # type: ignore[attr-defined]
    assert result.exit_code == 1, text  # type: ignore[attr-defined]
    assert "NOT MEASURED" in text and "0.0%" not in text and "nothing was measured" in text
    assert "'refs' looks like it holds sources" in text
    summary = AuditSummary.model_validate_json((out / "summary.json").read_text("utf-8"))
    support = summary.overall.statement_support
    assert support.value is None and support.ci is None
    assert "no answer cites a source" in (support.reason or "")
    assert summary.overall.response_support.value is None
    assert any("NOT MEASURED" in w for w in summary.warnings)
    assert any("3 answers have a field 'refs'" in w for w in summary.warnings)
    html = (out / "report.html").read_text("utf-8")
    assert "not measured" in html and 'id="run-warnings"' in html
    assert "no answer cites a source" in html


def test_terminal_names_each_judge_error_cause_once(setup: tuple[Path, Path],
                                                    tmp_path: Path) -> None:
    data, config = setup
    register_fake("broken", ScriptedProvider(lambda _r: "I cannot answer in JSON."))
    try:
        result = _audit(str(data), "--out", str(tmp_path / "out"), "--offline", "--judge",
                        "llm", "--model", "fake:broken", "--config", str(config))
    finally:
        unregister_fake("broken")
    text = " ".join(result.output.split())  # type: ignore[attr-defined]
    assert result.exit_code == 1  # type: ignore[attr-defined]
    assert "pairs not judged (4):" in text
    assert text.count("unparseable judge output") == 1 and "4 × unparseable judge output" in text
