"""Feature sets (medverify.risk.feature_sets): families by name, the evidence-led ``auto``
choice with folds grouped by question, classifiers that read a subset of the schema, and
``risk train --feature-set``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from medverify.cli import main
from medverify.errors import InputError
from medverify.risk import feature_sets as fs
from medverify.risk.classifier import predict_proba
from medverify.risk.persist import load_classifier, save
from medverify.risk.records import FeatureExample, FeatureRow, FeatureSchema
from medverify.risk.training import train_classifier

STATS = ("mean", "q10")
SERIES = ("logprob", "rank", "entropy", "top1", "n_tokens")


def schema_names(models: int = 2) -> list[str]:
    names = [f"m{i}.{s}.{t}" for i in range(models) for s in SERIES for t in STATS]
    names += [f"{c}.m0_m1.{t}" for c in ("kl", "dlogprob") for t in STATS]
    return [*names, "kl.m0_m1.coverage", "unit.n_chars"]


NAMES = schema_names()
SCHEMA = FeatureSchema(version="2", granularity="answer", scorers=["hf:a", "hf:b"],
                       names=NAMES)


def grouped_data(n_questions: int = 60, seed: int = 0,
                 signal: str = "m0.logprob.mean") -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per question a fact and an edited copy; only ``signal`` tells them apart, and every
    column carries a per-question offset (questions differ far more than an edit)."""
    rng = np.random.default_rng(seed)
    x, y, groups = [], [], []
    for q in range(n_questions):
        base = rng.normal(size=len(NAMES)) * 3
        for label in (0, 1):
            row = base + rng.normal(size=len(NAMES)) * 0.3
            row[NAMES.index(signal)] += -1.5 * label
            x.append(row)
            y.append(label)
            groups.append(f"q{q}")
    return np.array(x), np.array(y), groups


def test_families_select_the_right_columns() -> None:
    like = [NAMES[j] for j in fs.columns(NAMES, fs.LIKELIHOOD)]
    assert "m0.logprob.mean" in like and "m1.rank.q10" in like
    assert "m0.n_tokens.mean" in like and "unit.n_chars" in like  # always kept
    assert not any(n.startswith(("m0.entropy", "m0.top1", "kl.", "dlogprob.")) for n in like)
    cross = [NAMES[j] for j in fs.columns(NAMES, fs.LIKELIHOOD + fs.CROSS)]
    assert "dlogprob.m0_m1.mean" in cross and "kl.m0_m1.coverage" in cross
    only_m1 = [NAMES[j] for j in fs.columns(NAMES, None, models={1})]
    assert only_m1 and all(n.startswith("m1.") or n == "unit.n_chars" for n in only_m1)
    assert fs.columns(NAMES, None) == list(range(len(NAMES)))


def test_named_sets_and_errors() -> None:
    assert fs.named(NAMES, "all").columns == NAMES
    with pytest.raises(InputError, match="unknown feature set"):
        fs.named(NAMES, "everything")
    with pytest.raises(InputError, match="keeps none"):
        fs.named(["x.y"], "likelihood")
    with pytest.raises(InputError, match="not in the feature schema"):
        fs.indices(NAMES, ["m9.logprob.mean"])


def test_auto_picks_a_set_holding_the_signal_by_grouped_cv() -> None:
    x, y, groups = grouped_data()
    chosen = fs.choose(x, y, groups, NAMES)
    assert set(chosen.cv_auc) == set(fs.FEATURE_SETS)
    assert chosen.folds == 5 and chosen.groups == 60
    assert chosen.cv_auc[chosen.name] == max(chosen.cv_auc.values())
    assert "m0.logprob.mean" in chosen.columns


def test_auto_prefers_fewer_noisy_columns_when_only_likelihood_carries_signal() -> None:
    x, y, groups = grouped_data(n_questions=80, seed=1, signal="m0.rank.q10")
    rng = np.random.default_rng(9)
    noisy = [j for j, n in enumerate(NAMES) if ".entropy." in n or ".top1." in n
             or n.startswith(("kl.", "dlogprob."))]
    x[:, noisy] = rng.normal(size=(len(x), len(noisy))) * 5  # pure noise, no group offset
    chosen = fs.choose(x, y, groups, NAMES)
    assert chosen.cv_auc["likelihood"] > chosen.cv_auc["all"]
    assert chosen.name == "likelihood"
    assert chosen.cv_auc["mean-logprob"] < chosen.cv_auc["likelihood"]  # lacks the signal


def test_mean_logprob_keeps_one_column_per_model_and_the_lengths() -> None:
    picked = fs.named(NAMES, "mean-logprob").columns
    assert picked == ["m0.logprob.mean", "m0.n_tokens.mean", "m0.n_tokens.q10",
                      "m1.logprob.mean", "m1.n_tokens.mean", "m1.n_tokens.q10", "unit.n_chars"]


def test_too_few_groups_keep_all_features_and_say_so() -> None:
    x, y, _ = grouped_data(n_questions=3)
    chosen = fs.choose(x, y, ["one"] * len(y), NAMES)
    assert chosen.name == "all" and chosen.columns == NAMES
    assert "too few" in chosen.note and chosen.cv_auc == {}


def rows_of(x: np.ndarray) -> list[FeatureRow]:
    return [FeatureRow(unit_id=f"u{i}", granularity="answer", text="t",
                       values=dict(zip(NAMES, map(float, r), strict=True)))
            for i, r in enumerate(x)]


def test_a_subset_classifier_scores_full_rows_and_survives_a_round_trip(tmp_path: Path) -> None:
    x, y, groups = grouped_data()
    selection = fs.named(NAMES, "likelihood")
    trained = train_classifier(x, y, SCHEMA, data_sha256="d" * 64, n_estimators=10,
                               selection=selection, groups=groups,
                               trained_on={"dataset": "synthetic"})
    card = trained.card
    assert card.columns == selection.columns and card.schema_.names == NAMES
    assert card.feature_selection["name"] == "likelihood"
    assert card.trained_on == {"dataset": "synthetic", "inner_split": "by group"}
    assert set(card.training_metrics().importance.random_forest) == set(selection.columns)
    test_groups = {groups[i] for i in trained.test.indices}
    train_groups = {groups[i] for i in set(range(len(y))) - set(trained.test.indices)}
    assert not test_groups & train_groups  # no question on both sides
    save(trained, tmp_path / "clf")
    loaded = load_classifier(tmp_path / "clf")
    assert loaded.card.model_columns() == selection.columns
    p = predict_proba(loaded, rows_of(x[:6]), schema=SCHEMA)
    direct = trained.model.predict_proba(x[:6][:, fs.indices(NAMES, selection.columns)])[:, 1]
    assert np.allclose(p, direct)


def test_risk_train_cli_chooses_and_records_the_feature_set(tmp_path: Path) -> None:
    x, y, groups = grouped_data()
    path = tmp_path / "features.jsonl"
    lines = [FeatureExample(id=f"e{i}", row=row, label="HALLUCINATION" if y[i] else "FACT",
                            provenance={"question_id": groups[i]}).model_dump_json()
             for i, row in enumerate(rows_of(x))]
    path.write_text("\n".join(lines) + "\n", "utf-8")
    path.with_name(path.name + ".schema.json").write_text(SCHEMA.model_dump_json(), "utf-8")
    runner = CliRunner()
    auto = runner.invoke(main, ["risk", "train", str(path), "--out", str(tmp_path / "a"),
                                "--trees", "10"])
    assert auto.exit_code == 0, auto.output
    assert "feature set:" in auto.output and "CV AUC" in auto.output
    card = json.loads((tmp_path / "a" / "card.json").read_text("utf-8"))["card"]
    assert set(card["feature_selection"]["cv_auc"]) == set(fs.FEATURE_SETS)
    assert card["trained_on"]["group_by"] == "question_id"
    full = runner.invoke(main, ["risk", "train", str(path), "--out", str(tmp_path / "b"),
                                "--trees", "10", "--feature-set", "all", "--group-by", ""])
    assert full.exit_code == 0, full.output
    card = json.loads((tmp_path / "b" / "card.json").read_text("utf-8"))["card"]
    assert card["columns"] == NAMES and card["trained_on"]["inner_split"].startswith("by ex")
    bad = runner.invoke(main, ["risk", "train", str(path), "--out", str(tmp_path / "c"),
                               "--feature-set", "nope"])
    assert bad.exit_code != 0


def test_a_shipped_classifier_is_found_by_name_and_listed(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from medverify.risk import persist

    x, y, groups = grouped_data()
    trained = train_classifier(x, y, SCHEMA, data_sha256="d" * 64, n_estimators=5,
                               selection=fs.named(NAMES, "likelihood"), groups=groups,
                               trained_on={"dataset": "kqa", "dtype": "bfloat16",
                                           "held_out_test": {"roc_auc": 0.71,
                                                             "ci95": [0.68, 0.74],
                                                             "questions": 60}})
    monkeypatch.setattr(persist, "SHIPPED_DIR", tmp_path / "shipped")
    save(trained, tmp_path / "shipped" / "kqa-test")
    assert list(persist.shipped_classifiers()) == ["kqa-test"]
    loaded = load_classifier("kqa-test")
    assert loaded.directory == tmp_path / "shipped" / "kqa-test"
    own = tmp_path / "kqa-test"  # a directory of that name, where the user is, wins
    save(trained, own)
    monkeypatch.chdir(tmp_path)
    assert load_classifier("kqa-test").directory == Path("kqa-test")
    with pytest.raises(InputError, match=r"shipped one \(kqa-test\)"):
        load_classifier("no-such-classifier")
    listed = CliRunner().invoke(main, ["risk", "classifiers"], terminal_width=200)
    assert listed.exit_code == 0, listed.output
    assert "kqa-test" in listed.output and "0.71" in listed.output
    assert "likelihood" in listed.output and "bfloat16" in listed.output


def test_the_shipped_kqa_ensemble_loads_and_its_card_says_what_it_was_trained_on() -> None:
    from medverify.llm.local_models import CATALOGUE
    from medverify.risk import persist

    assert "kqa-ensemble" in persist.shipped_classifiers()
    loaded = load_classifier("kqa-ensemble")  # the model file's sha256 matches its card
    card = loaded.card
    assert [s.removeprefix("hf:") for s in card.schema_.scorers] == [
        "smollm2-135m", "gemma3-270m", "qwen2.5-0.5b", "qwen2.5-1.5b"]
    assert all(s.removeprefix("hf:") in CATALOGUE for s in card.schema_.scorers)
    assert card.feature_selection["name"] in fs.FEATURE_SETS
    assert card.model_columns() and set(card.model_columns()) <= set(card.schema_.names)
    assert card.trained_on["dataset"] == "kqa" and card.trained_on["dtype"] == "bfloat16"
    held = card.trained_on["held_out_test"]
    assert held["questions"] == 60 and held["ci95"][0] <= held["roc_auc"] <= held["ci95"][1]
    assert loaded.model.n_features_in_ == len(card.model_columns())
