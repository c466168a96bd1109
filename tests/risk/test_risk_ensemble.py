"""Risk from an ensemble of models, end to end on tiny random-weight models of the packaged
scorers' architectures (SmolLM2: llama; Gemma 3: gemma3; Qwen2.5: qwen2, two sizes), each
with its own tokenizer: ``risk features`` with all of them (per-model series and every
pair's cross-model series), ``risk train`` choosing its feature set by question-grouped
cross-validation, and ``risk score`` with the chosen subset. Offline, nothing downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from medverify.cli import main
from medverify.risk.data import write_examples
from medverify.risk.feature_sets import FEATURE_SETS
from medverify.risk.records import FeatureExample, LabeledExample, RiskLabel
from medverify.testing.tiny_lm import build_tiny_lm

PAIRS = [("Metformin is a first-line medicine for type 2 diabetes.",
          "Metformin is a first-line medicine for asthma."),
         ("The usual starting dose of metformin is 500 mg daily.",
          "The usual starting dose of metformin is 5000 mg daily."),
         ("Aspirin lowers the risk of heart attack in some adults.",
          "Aspirin raises the risk of heart attack in all children."),
         ("Insulin lowers blood glucose.", "Insulin raises blood glucose in everyone."),
         ("Vaccines help prevent infections.", "Vaccines cause the infections they prevent.")]
ARCHS = {"smollm2-like": ("llama", 32), "gemma3-like": ("gemma3", 32),
         "qwen-small": ("qwen2", 32), "qwen-large": ("qwen2", 48)}


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("ensemble")
    return [f"hf:{build_tiny_lm(root / name, arch, hidden=hidden, seed=i)}"
            for i, (name, (arch, hidden)) in enumerate(ARCHS.items())]


def _examples(path: Path, questions: int = 12) -> Path:
    examples = []
    for q in range(questions):  # a fact and its edited copy share a question id
        fact, false = PAIRS[q % len(PAIRS)]
        for label, text in ((RiskLabel.FACT, fact), (RiskLabel.HALLUCINATION, false)):
            examples.append(LabeledExample(
                id=f"q{q}-{label.value[0]}", question=f"Question {q}?", text=text, label=label,
                provenance={"source": "test", "question_id": f"q{q}"}))
    write_examples(path, examples)
    return path


def _run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_ensemble_features_train_and_score(ensemble: list[str], tmp_path: Path) -> None:
    examples = _examples(tmp_path / "examples.jsonl")
    features = tmp_path / "features.jsonl"
    _run("risk", "features", str(examples), *[a for s in ensemble for a in ("--scorer", s)],
         "--out", str(features))
    schema = json.loads((tmp_path / "features.jsonl.schema.json").read_text("utf-8"))
    names = schema["names"]
    assert schema["scorers"] == ensemble
    for i in range(len(ensemble)):
        assert f"m{i}.logprob.mean" in names and f"m{i}.entropy.mean" in names
    pairs = [f"m{i}_m{j}" for i in range(4) for j in range(i + 1, 4)]
    for pair in pairs:  # every pair's agreement, on the same characters
        for series in ("kl", "dlogprob", "dentropy"):
            assert f"{series}.{pair}.mean" in names
    rows = [FeatureExample.model_validate_json(x)
            for x in features.read_text("utf-8").splitlines()]
    assert len(rows) == 24 and all(list(r.row.values) == names for r in rows)
    assert all(not r.row.missing for r in rows)  # every model scored every example
    # the pair's log-prob difference on shared characters is not zero: the models differ
    assert any(abs(r.row.values["dlogprob.m0_m3.mean"]) > 1e-6 for r in rows)

    out = _run("risk", "train", str(features), "--out", str(tmp_path / "clf"), "--trees", "10")
    assert "feature set:" in out
    card = json.loads((tmp_path / "clf" / "card.json").read_text("utf-8"))["card"]
    selection = card["feature_selection"]
    assert selection["name"] in FEATURE_SETS and set(selection["cv_auc"]) == set(FEATURE_SETS)
    assert selection["groups"] == 12 and card["trained_on"]["inner_split"] == "by group"
    assert set(card["columns"]) <= set(names)

    answer = tmp_path / "answer.txt"
    answer.write_text("Insulin lowers blood glucose. Vaccines cause infections.", "utf-8")
    scored = _run("risk", "score", str(answer), "--classifier", str(tmp_path / "clf"),
                  "-q", "Question 3?")
    assert "P(hallucination)" in scored and "error" not in scored


def test_a_dtype_other_than_the_classifiers_is_warned_about(
        ensemble: list[str], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from medverify.config import Config
    from medverify.risk.stage import RiskStage

    examples = _examples(tmp_path / "examples.jsonl")
    features = tmp_path / "features.jsonl"
    _run("risk", "features", str(examples), "--scorer", ensemble[0], "--out", str(features))
    _run("risk", "train", str(features), "--out", str(tmp_path / "clf"), "--trees", "5")
    card_path = tmp_path / "clf" / "card.json"
    envelope = json.loads(card_path.read_text("utf-8"))
    envelope["card"]["trained_on"]["dtype"] = "bfloat16"  # as the ensemble benchmark writes
    card_path.write_text(json.dumps(envelope), "utf-8")
    with caplog.at_level("WARNING", logger="medverify.risk.stage"):
        RiskStage.from_config(Config.load(), classifier=tmp_path / "clf")
    assert "computed in bfloat16; [risk] dtype is auto" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="medverify.risk.stage"):
        RiskStage.from_config(Config.load(risk={"dtype": "bfloat16"}),
                              classifier=tmp_path / "clf")
    assert "dtype" not in caplog.text
    import torch

    if not torch.cuda.is_available():  # auto is float32 on a CPU: a float32 card matches
        envelope["card"]["trained_on"]["dtype"] = "float32"
        card_path.write_text(json.dumps(envelope), "utf-8")
        caplog.clear()
        with caplog.at_level("WARNING", logger="medverify.risk.stage"):
            RiskStage.from_config(Config.load(), classifier=tmp_path / "clf")
        assert "dtype" not in caplog.text
