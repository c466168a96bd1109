"""`medverify risk` end to end on two tiny random-weight models with different tokenizers:
features -> train -> eval -> score, offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from medverify.cli import main
from medverify.kit import FlowKit
from medverify.risk.data import write_examples
from medverify.risk.records import FeatureExample, LabeledExample, RiskLabel
from medverify.testing.tiny_lm import build_tiny_lm

FACTS = [
    "Metformin is a first-line medicine for type 2 diabetes.",
    "The usual starting dose of metformin is 500 mg daily.",
    "Aspirin lowers the risk of heart attack in some adults.",
    "Regular exercise lowers blood pressure.",
    "Insulin lowers blood glucose.",
    "Vaccines help prevent infections.",
]
FALSE = [
    "Metformin is a first-line medicine for asthma.",
    "The usual starting dose of metformin is 5000 mg daily.",
    "Aspirin raises the risk of heart attack in all children.",
    "Regular exercise raises blood pressure permanently.",
    "Insulin raises blood glucose in everyone.",
    "Vaccines cause the infections they prevent.",
]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("risk-cli-models")
    return [f"hf:{build_tiny_lm(root / 'gpt2', 'gpt2')}",
            f"hf:{build_tiny_lm(root / 'llama', 'llama')}"]


def _examples(path: Path) -> Path:
    examples = []
    for n in range(4):  # 24 per class: enough for a stratified split
        for label, texts in ((RiskLabel.FACT, FACTS), (RiskLabel.HALLUCINATION, FALSE)):
            examples += [LabeledExample(id=f"{label.value[0]}{n}-{i}", question="Q?",
                                        text=t, label=label, provenance={"source": "test"})
                         for i, t in enumerate(texts)]
    write_examples(path, examples)
    return path


def _run(*args: str) -> object:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_features_train_eval_score(models: list[str], tmp_path: Path) -> None:
    examples = _examples(tmp_path / "examples.jsonl")
    features = tmp_path / "features.jsonl"
    scorer_args = [a for spec in models for a in ("--scorer", spec)]
    _run("risk", "features", str(examples), *scorer_args, "--out", str(features))
    lines = [FeatureExample.model_validate_json(x)
             for x in features.read_text("utf-8").splitlines()]
    schema = json.loads((tmp_path / "features.jsonl.schema.json").read_text("utf-8"))
    assert len(lines) == 48 and schema["scorers"] == models
    assert all(list(x.row.values) == schema["names"] for x in lines)
    assert any(name.startswith("kl.m0_m1") for name in schema["names"])  # across models

    classifier = tmp_path / "classifier"
    trained = _run("risk", "train", str(features), "--out", str(classifier), "--trees", "10")
    assert "ROC AUC" in trained.output  # type: ignore[attr-defined]
    card = json.loads((classifier / "card.json").read_text("utf-8"))
    assert card["card"]["schema"]["names"] == schema["names"]
    assert (classifier / "plots" / "roc.svg").is_file()

    evaluated = _run("risk", "eval", str(classifier), str(features))
    assert "ROC AUC" in evaluated.output  # type: ignore[attr-defined]

    answer = tmp_path / "answer.txt"
    answer.write_text("Metformin is first-line for diabetes. Start with 5000 mg daily.", "utf-8")
    scored = _run("risk", "score", str(answer), "--classifier", str(classifier), "-q", "Q?")
    out = scored.output  # type: ignore[attr-defined]
    assert "5000 mg" in out and "P(hallucination)" in out and "error" not in out


def test_score_without_a_classifier_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["risk", "score", "-"], input="Some text.")
    assert result.exit_code == 2 and "no risk classifier" in result.output


def test_the_check_pipeline_adds_each_claims_risk(models: list[str], tmp_path: Path) -> None:
    import asyncio

    from medverify.checker import Checker
    from medverify.config import Config
    from medverify.kb import KnowledgeBase
    from medverify.records import Answer, Document

    examples = _examples(tmp_path / "examples.jsonl")
    features = tmp_path / "features.jsonl"
    _run("risk", "features", str(examples), "--scorer", models[0], "--out", str(features))
    _run("risk", "train", str(features), "--out", str(tmp_path / "clf"), "--trees", "5")
    config = Config.load(judge="builtin", risk={"classifier": str(tmp_path / "clf")})
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="met", text=FACTS[0] + " " + FACTS[1])])
        checker = Checker.from_config(config, kit=FlowKit(kb=kb))
        assert checker.models["risk"].endswith(models[0])
        results, errors = asyncio.run(checker.check_answer(
            Answer(text="Metformin is first-line. Start with 5000 mg daily.", question="Q?")))
    assert errors == [] and len(results) == 2
    assert all(r.hallucination_risk is not None and 0 <= r.hallucination_risk <= 1
               for r in results)


def test_features_resume_from_an_interrupted_run(models: list[str], tmp_path: Path) -> None:
    """A kill leaves finished blocks in OUT.partial (the last line possibly cut short): the
    rerun keeps them, redoes the rest, and writes the same file as a clean run."""
    examples = _examples(tmp_path / "examples.jsonl")
    clean, resumed = tmp_path / "clean.jsonl", tmp_path / "resumed.jsonl"
    _run("risk", "features", str(examples), "--scorer", models[0], "--out", str(clean))
    assert not (tmp_path / "clean.jsonl.partial").exists()
    finished = clean.read_text("utf-8").splitlines()  # what the killed run had written
    partial = tmp_path / "resumed.jsonl.partial"
    # what a kill after the first block (32 lines) and half a line would leave
    first_line = _first_partial_line(models[0], examples, tmp_path)
    partial.write_text(first_line + "\n" + "\n".join(finished[:32]) + "\n" + finished[32][:40],
                       "utf-8")
    result = _run("risk", "features", str(examples), "--scorer", models[0],
                  "--out", str(resumed))
    assert "32 resumed" in " ".join(result.output.split())  # type: ignore[attr-defined]
    assert resumed.read_text("utf-8") == clean.read_text("utf-8")
    assert not partial.exists()


def _first_partial_line(model: str, examples: Path, tmp_path: Path) -> str:
    """The header line a run of these scorers on this input writes (its resume key)."""
    from medverify.cli.risk import _resume_key
    from medverify.config import Config
    from medverify.risk.stage import RiskStage, _PartialHeader

    stage = RiskStage.from_config(Config(), scorers=[model])
    return _PartialHeader(partial=_resume_key(stage, examples, None)).model_dump_json()
