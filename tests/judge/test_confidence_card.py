"""Confidence cards (medverify.judge.confidence, evals.calibrate, `medverify calibrate`):
fitting on a judge of known quality, the held-out rule, applying a card, and the loop's
labels as training data."""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from medverify.cli import main
from medverify.config import Config
from medverify.errors import ConfigError
from medverify.evals import calibrate as flow
from medverify.judge import JudgeItem
from medverify.judge.build import create_judge
from medverify.judge.confidence.card import RIGHT, load_card, resolve_card
from medverify.judge.confidence.fit import _threshold
from medverify.judge.confidence.wrap import CardJudge
from medverify.records import Category, Claim, Passage, Verdict
from medverify.review.records import ReviewItem, ReviewLabel
from medverify.store.access import AuditLog
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore
from medverify.testing.known_judge import KnownQualityJudge

LABELS = ("SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO")


def _examples(n: int, seed: int, prefix: str = "c") -> list[flow.Labelled]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        claim = Claim(id=f"{prefix}{i}", text=f"Drug {i} lowers blood pressure by {i % 7} mmHg.")
        passage = Passage(id=f"p{i}", doc_id=f"d{i}", text=f"Trial {i}: blood pressure fell.")
        out.append(flow.Labelled(JudgeItem(claim=claim, passages=[passage]),
                                 rng.choice(LABELS), f"g{i // 2}"))
    return out


def _fitted(n: int = 900, accuracy: float = 0.85, seed: int = 1, **signals: tuple[float, float]):
    """A known-quality judge and the card fitted to it, fitted once per set of arguments in
    a worker (the judge's verdicts follow from the claim ids and its seed); each caller gets
    its own deep copies (a test adds gold labels to its judge)."""
    judge, card = _fit(n, accuracy, seed, tuple(sorted(signals.items())))
    return copy.deepcopy(judge), card.model_copy(deep=True)


@functools.cache
def _fit(n: int, accuracy: float, seed: int, signals: tuple[tuple[str, tuple[float, float]], ...]):
    examples = _examples(n, seed)
    judge = KnownQualityJudge({e.item.claim.id: e.gold for e in examples}, accuracy, seed,
                              **dict(signals))
    verdicts = asyncio.run(flow.judge_all(judge, examples))
    card = flow.fit_card(judge, examples, verdicts, sources=["synthetic"],
                         targets={"FACT": 0.9}, by="tester")
    return judge, card


def test_a_judge_of_known_quality_gets_thresholds_that_hold_on_unseen_claims() -> None:
    judge, card = _fitted()
    assert card.judge == judge.judge_id and card.prompt == "known/v1"
    assert card.data.rows == 900 and card.data.created_by == "tester"
    fact = card.categories["FACT"]
    assert fact.target == 0.9 and fact.threshold is not None
    assert fact.cv_precision is not None and fact.cv_precision >= 0.9
    # unseen claims, same judge: the sure FACTs reach the target
    fresh = _examples(900, seed=7, prefix="u")
    judge.gold |= {e.item.claim.id: e.gold for e in fresh}
    wrapped = CardJudge(judge, card)
    verdicts = asyncio.run(flow.judge_all(wrapped, fresh))
    sure = [(v, e) for v, e in zip(verdicts, fresh, strict=True)
            if v.confident and v.category == Category.FACT]
    right = sum(e.gold in RIGHT[Category.FACT] for _, e in sure)
    assert len(sure) >= 100 and right / len(sure) >= 0.88
    assert all(v.confidence is not None for v in verdicts)


def test_a_useless_judge_gets_no_threshold() -> None:
    # right a third of the time, and its log-probs say nothing about when
    _, card = _fitted(accuracy=0.34, seed=3, right_p=(0.5, 0.8), wrong_p=(0.5, 0.8))
    assert all(fit.threshold is None and fit.why_none for fit in card.categories.values()
               if fit.target >= 0.7)


def test_a_sure_class_less_precise_than_the_unsure_ones_is_refused() -> None:
    p = np.array([0.9] * 100 + [0.5] * 100 + [0.1] * 200)
    y = np.array([True] * 65 + [False] * 35 + [True] * 20 + [False] * 80 + [True] * 200)
    threshold, why = _threshold(p, y, 0.5)
    assert threshold is None and "less precise" in str(why)
    y_good = np.array([True] * 90 + [False] * 10 + [False] * 300)
    assert _threshold(p, y_good, 0.5)[0] == pytest.approx(0.9)


def test_a_card_for_another_judge_warns_and_gives_no_confidence(
        caplog: pytest.LogCaptureFixture) -> None:
    judge, card = _fitted(n=300)
    other = KnownQualityJudge(judge.gold, 0.85, seed=99)  # another judge id
    with caplog.at_level("WARNING"):
        wrapped = CardJudge(other, card)
    assert "fitted for judge" in caplog.text
    examples = _examples(300, 1)
    verdicts = asyncio.run(flow.judge_all(wrapped, examples))
    assert all(v.confident is False and v.confidence is None and "fitted for judge"
               in str(v.not_sure) for v in verdicts)


def test_errors_pass_and_a_judges_own_doubt_stands() -> None:
    judge, card = _fitted(n=600)
    wrapped = CardJudge(judge, card)
    item = JudgeItem(claim=Claim(id="nobody", text="x"), passages=[])
    error = asyncio.run(wrapped.judge([item]))[0]
    assert error.category == Category.ERROR and error.confidence is None
    doubted = judge.verdict(_examples(1, 1)[0].item).model_copy(
        update={"confident": False, "not_sure": "the claim's numbers are not in the passage"})
    out = wrapped.assess(_examples(1, 1)[0].item, doubted)
    assert out.confident is False and out.not_sure == doubted.not_sure
    assert out.confidence is not None


def test_cards_are_found_by_path_and_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    monkeypatch.setenv("MEDVERIFY_HOME", str(tmp_path))
    _, card = _fitted(n=300)
    (tmp_path / "calibrations").mkdir()
    path = tmp_path / "calibrations" / "mine.json"
    path.write_text(card.model_dump_json())
    assert resolve_card("mine") == card == resolve_card(str(path)) == load_card(path)
    assert resolve_card(None) is None
    with pytest.raises(ConfigError, match="neither a file nor a known card"):
        resolve_card("nope")
    family_file = Path(__file__).parents[2] / "src/medverify/judge/calibration.json"
    assert resolve_card(str(family_file)) is None  # the built-in judge reads that one
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"kind": "medverify.confidence-card", "features": ["x"]}))
    with pytest.raises(ConfigError):
        resolve_card(str(broken))


def test_create_judge_wraps_the_configured_judge_with_its_card(tmp_path: Path) -> None:
    path = tmp_path / "card.json"
    builtin = create_judge(Config(), None)
    _, card = _fitted(n=300)
    path.write_text(card.model_copy(update={"judge": builtin.judge_id, "prompt": None})
                    .model_dump_json())
    config = Config.model_validate({"judge_settings": {"calibration": str(path)}})
    wrapped = create_judge(config, None)
    assert isinstance(wrapped, CardJudge) and wrapped.mismatch is None
    assert wrapped.judge_id == builtin.judge_id and wrapped.offline is True


def _review_store(path: Path) -> None:
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    items, labels = [], []
    for n, (label, text) in enumerate([
            (ReviewLabel.FACT, "Metformin is a first-line treatment for type 2 diabetes."),
            (ReviewLabel.HALLUCINATION, "Metformin cures type 1 diabetes."),
            (ReviewLabel.CANNOT_TELL, "Metformin is blue."),
            (ReviewLabel.COVERAGE_GAP, "Metformin helps with migraines.")]):
        items.append(ReviewItem(
            id=f"rv-{n}", answer_id=f"a-{n}", answer_text=text, claim=Claim(id=f"c{n}", text=text),
            passages=[Passage(id=f"p{n}", doc_id="d", text="Metformin is the first-line drug "
                              "for type 2 diabetes.")],
            category="COVERAGE_GAP", created_at=t0 + timedelta(minutes=n)))
        labels.append((f"rv-{n}", label))
    with RunStore(path) as runs:
        store = ReviewStore(runs)
        store.add_items(items)
        for item_id, label in labels:
            store.label(item_id, "dr-a", label)


def test_closed_review_items_are_labelled_examples(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    _review_store(db)
    examples, skipped = flow.reviewed_items(db)
    assert [e.gold for e in examples] == ["SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO"]
    assert skipped == {"label CANNOT_TELL": 1}
    assert examples[0].item.passages[0].text.startswith("Metformin is the first-line")
    assert flow.data_hash(examples) != flow.data_hash(examples[:2])


def test_calibrate_command_fits_applies_and_records(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDVERIFY_HOME", str(tmp_path))
    db = tmp_path / "runs.db"
    _review_store(db)
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"id": f"x{i}", "claim": f"Aspirin {i} mg reduces fever.", "evidence":
             f"Aspirin {i} mg reduced fever in adults." if i % 2 else "Aspirin raised fever.",
             "label": "SUPPORTED" if i % 2 else "CONTRADICTED"} for i in range(24)]
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(main, [
        "calibrate", str(pairs), "--from-reviews", "--apply", "site-a", "--by", "dr-b",
        "--out", str(tmp_path / "card.json")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    card = load_card(tmp_path / "calibrations" / "site-a.json")
    assert card.data.rows == 27 and card.data.created_by == "dr-b"
    assert card.judge.startswith("builtin:") and "reviews:3 closed items" in card.data.sources
    assert "CANNOT_TELL" in result.output
    with RunStore(db) as runs:
        [event] = [e for e in AuditLog(runs).list() if e.action == "calibration.apply"]
    assert event.target == card.card_id and json.loads(event.detail or "{}")["by"] == "dr-b"
    assert resolve_card("site-a") == card


def test_calibrate_refuses_sets_that_do_not_allow_fitting() -> None:
    result = CliRunner().invoke(main, ["calibrate", "--set", "healthver_dev"])
    assert result.exit_code != 0 and "healthver_dev" in result.output
    with pytest.raises(Exception, match="may not be fitted on"):
        flow.training_set("healthver_dev")


def test_verdict_without_signals_has_neutral_features() -> None:
    from medverify.judge.confidence.signals import FEATURES, verdict_features

    verdict = Verdict(claim_id="c", factual=None, counterfactual=None)
    x = verdict_features("A claim.", [], verdict)
    assert len(x) == len(FEATURES) and x[0] == 0.0 and x[2] == 0.0 and x[3] == 1.0


def test_a_card_replaces_the_calibration_of_a_judge_that_declares_so() -> None:
    judge, card = _fitted(n=600)
    item = _examples(1, 1)[0].item
    own = judge.verdict(item).model_copy(update={
        "confident": False, "not_sure": "no calibration for this model"})
    kept = CardJudge(judge, card).assess(item, own)
    assert kept.not_sure == "no calibration for this model" and kept.confident is False
    judge.card_replaces_calibration = True  # type: ignore[attr-defined]
    replaced = CardJudge(judge, card).assess(item, own)
    assert replaced.not_sure != own.not_sure and replaced.confidence is not None


def test_a_threshold_must_hold_on_every_source() -> None:
    from medverify.judge.confidence.fit import _robust_threshold

    p = np.array([0.9] * 40 + [0.9] * 40)
    y = np.array([True] * 40 + [True] * 10 + [False] * 30)
    threshold, why = _robust_threshold(p, y, ["a"] * 40 + ["b"] * 40, 0.7)
    assert threshold is None and str(why).startswith("b: ")
    assert _robust_threshold(p[:40], y[:40], ["a"] * 40, 0.7)[0] == pytest.approx(0.9)


def test_a_card_shipped_for_the_judge_applies_without_a_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from medverify.judge.confidence import card as cards

    builtin = create_judge(Config(), None)
    _, card = _fitted(n=300)
    mine = card.model_copy(update={"judge": builtin.judge_id, "prompt": None})
    (tmp_path / "builtin.json").write_text(mine.model_dump_json())
    monkeypatch.setattr(cards, "SHIPPED_DIR", tmp_path)
    wrapped = create_judge(Config(), None)
    assert isinstance(wrapped, CardJudge) and wrapped.card == mine
    assert cards.shipped_card_for("llm:other", None) is None


def test_eval_pairs_names_the_card_it_reports_against(tmp_path: Path) -> None:
    builtin = create_judge(Config(), None)
    _, card = _fitted(n=300)
    card = card.model_copy(update={"judge": builtin.judge_id, "prompt": None})
    path = tmp_path / "card.json"
    path.write_text(card.model_dump_json())
    config = tmp_path / "medverify.toml"
    config.write_text(f'[judge_settings]\ncalibration = "{path}"\n')
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"id": "p1", "claim": "Aspirin reduces fever.", "evidence":
                                 "Aspirin reduces fever.", "label": "SUPPORTED"}) + "\n")
    result = CliRunner().invoke(main, ["eval", "pairs", str(pairs), "--config", str(config)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"confidence card {card.card_id}" in " ".join(result.output.split())


def test_a_card_never_changes_a_category_or_its_evidence() -> None:
    """A card only says how sure: whatever a model wrote or a reviewer taught, the verdict's
    category, analyses and exact-check findings are the judge's."""
    judge, card = _fitted(n=600)
    examples = _examples(300, 5, prefix="v")
    judge.gold |= {e.item.claim.id: e.gold for e in examples}
    plain = asyncio.run(flow.judge_all(judge, examples))
    carded = asyncio.run(flow.judge_all(CardJudge(judge, card), examples))
    for a, b in zip(plain, carded, strict=True):
        assert (a.category, a.factual, a.counterfactual, a.findings) == (
            b.category, b.factual, b.counterfactual, b.findings)
