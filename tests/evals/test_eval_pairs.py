from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import medverify.judge.builtin as builtin
from medverify.cli import main
from medverify.errors import InputError
from medverify.evals.pairs import (
    ERROR,
    JUDGMENT_ERROR,
    Pair,
    evaluate_pairs,
    load_pairs,
    predicted_label,
    score_pairs,
)
from medverify.judge.builtin import BuiltinJudge
from medverify.records import Analysis, Verdict
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge
from medverify.testing.verifier import LexicalVerifier

EVIDENCE = "The usual starting dose of metformin is 500 mg daily with meals."
THREE_WAY = [
    {"id": "a", "claim": "The starting dose of metformin is 500 mg.", "label": "SUPPORTED"},
    {"id": "b", "claim": "The starting dose of metformin is 5000 mg.", "label": "CONTRADICTED"},
    {"id": "c", "claim": "Gout attacks happen at night.", "label": "NOT_ENOUGH_INFO"},
    {"id": "d", "claim": "Metformin starting dose with meals.", "label": "NOT_ENOUGH_INFO"},
]
TWO_WAY = [
    {"id": "e", "claim": "The starting dose of metformin is 500 mg.", "label": "SUPPORTED"},
    {"id": "f", "claim": "Gout attacks happen at night.", "label": "NOT_SUPPORTED"},
]


def _write(path: Path, rows: list[dict[str, str]], labels: str, dataset: str) -> Path:
    lines = [
        json.dumps({**r, "evidence": EVIDENCE, "labels": labels, "dataset": dataset, "meta": {}})
        for r in rows
    ]
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return (
        _write(tmp_path / "three.jsonl", THREE_WAY, "3-way", "toy3"),
        _write(tmp_path / "two.jsonl", TWO_WAY, "2-way", "toy2"),
    )


def test_builtin_judge_scores_files_and_pools_them(files: tuple[Path, Path]) -> None:
    result = evaluate_pairs(list(files), BuiltinJudge(LexicalVerifier()))
    three, two = result.files
    # lexical fake: a (all words) SUPPORTED, b (5000 vs 500) CONTRADICTED, c NEI, d SUPPORTED
    assert three.confusion["SUPPORTED"]["SUPPORTED"] == 1
    assert three.confusion["CONTRADICTED"]["CONTRADICTED"] == 1
    assert three.confusion["NOT_ENOUGH_INFO"] == {
        "SUPPORTED": 1, "CONTRADICTED": 0, "NOT_ENOUGH_INFO": 1
    }
    assert three.accuracy == pytest.approx(0.75)
    assert three.balanced_accuracy == pytest.approx((1 + 1 + 0.5) / 3)
    assert three.macro_f1 == pytest.approx((2 / 3 + 1 + 2 / 3) / 3)
    assert three.per_class["NOT_ENOUGH_INFO"]["recall"] == pytest.approx(0.5)
    # S vs rest: gold S,C,N,N -> S,R,R,R ; predicted S,C,N,S -> S,R,R,S
    assert three.supported_vs_rest_balanced_accuracy == pytest.approx((1 + 2 / 3) / 2)
    assert two.labels == "2-way" and two.accuracy is None and two.macro_f1 is None
    assert two.supported_vs_rest_balanced_accuracy == pytest.approx(1.0)
    assert result.overall is not None and result.overall.n == 6
    assert result.overall.labels == "mixed" and result.overall.macro_f1 is None
    assert result.judge == "builtin:lexical-fake"
    assert three.pairs_per_second > 0


def test_limit_and_bad_records(tmp_path: Path, files: tuple[Path, Path]) -> None:
    assert len(load_pairs(files[0], limit=2)) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "claim": "c", "evidence": "e", "label": "MAYBE"}\n', "utf-8")
    with pytest.raises(InputError, match=r"bad\.jsonl:1"):
        load_pairs(bad)


def _verdict(supported: bool, contradicted: bool, judge: str, probs=None) -> Verdict:  # type: ignore[no-untyped-def]
    return Verdict(
        claim_id="c",
        factual=Analysis(holds=supported),
        counterfactual=Analysis(holds=contradicted),
        judge=judge,
        probabilities=probs,
    )


def test_label_mapping_and_judgment_errors() -> None:
    assert predicted_label(_verdict(True, False, "llm:x")) == "SUPPORTED"
    assert predicted_label(_verdict(False, True, "llm:x")) == "CONTRADICTED"
    assert predicted_label(_verdict(False, False, "llm:x")) == "NOT_ENOUGH_INFO"
    assert predicted_label(_verdict(True, True, "llm:x")) == JUDGMENT_ERROR
    probs = {"SUPPORTED": 0.7, "CONTRADICTED": 0.8}
    assert predicted_label(_verdict(True, True, "builtin:v", probs)) == "CONTRADICTED"
    assert predicted_label(Verdict(claim_id="c", error="boom")) == ERROR


def test_errors_are_counted_apart_not_scored() -> None:
    pairs = [
        Pair(id=str(i), claim="c", evidence="e", label=label)
        for i, label in enumerate(["SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO"])
    ]
    verdicts = [_verdict(True, False, "llm:x"), None, _verdict(True, True, "llm:x")]
    scores = score_pairs("x", pairs, verdicts, 1.0)
    assert (scores.n, scores.n_scored, scores.n_errors, scores.n_judgment_errors) == (3, 1, 1, 1)
    assert scores.accuracy == 1.0
    assert scores.confusion["CONTRADICTED"][ERROR] == 1
    assert scores.decided_by == {"llm": 2, "none": 1}


@pytest.fixture
def fake_verifier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builtin, "load_verifier", lambda path=None: LexicalVerifier())


@pytest.mark.usefixtures("fake_verifier")
def test_cli_prints_the_table_and_writes_json(files: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        main, ["eval", "pairs", *map(str, files), "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "macro-F1" in result.output and "three" in result.output and "all" in result.output
    data = json.loads(out.read_text("utf-8"))
    assert [f["name"] for f in data["files"]] == ["three", "two"]
    assert data["files"][0]["accuracy"] == pytest.approx(0.75)


@pytest.fixture
def fake_model() -> Iterator[str]:
    provider = ScriptedProvider(scripted_judge(keyword_rule(supported="500 mg")))
    register_fake("pairs", provider)
    yield "fake:pairs"
    unregister_fake("pairs")


def test_cli_llm_judge_needs_a_model_and_runs_with_one(
    files: tuple[Path, Path], fake_model: str
) -> None:
    runner = CliRunner(env={"COLUMNS": "200"})
    missing = runner.invoke(main, ["eval", "pairs", str(files[0]), "--judge", "llm"])
    assert missing.exit_code == 2 and "needs a model" in missing.output
    result = runner.invoke(
        main, ["eval", "pairs", str(files[0]), "--judge", "llm", "--model", fake_model,
               "--limit", "3"]
    )
    assert result.exit_code == 0, result.output
    assert "llm:fake:pairs" in result.output
