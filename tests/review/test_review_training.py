"""Reviewed labels as training data: closed review items as risk-classifier examples
(``review.risk_examples``, ``medverify risk data reviews`` then the usual ``risk features``
and ``risk train``, on a tiny random-weight model), and ``medverify review calibrate``
(the verifier's threshold calibration on reviewed single-passage claims)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from medverify.cli import main
from medverify.records import Claim, Passage
from medverify.review import ReviewItem, ReviewLabel, ReviewStatus, judged_example_id, risk_examples
from medverify.risk.data import read_examples, write_examples
from medverify.risk.records import LabeledExample, RiskLabel
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore
from medverify.testing.tiny_lm import build_tiny_lm

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
FACTS = ["Metformin is a first-line medicine for type 2 diabetes.",
         "Insulin lowers blood glucose.", "Vaccines help prevent infections.",
         "Regular exercise lowers blood pressure."]
FALSE = ["Metformin is a first-line medicine for asthma.",
         "Insulin raises blood glucose in everyone.",
         "Vaccines cause the infections they prevent.",
         "Regular exercise raises blood pressure permanently."]


def _item(n: int, text: str, *, passages: int = 1, probs: tuple[float, float, float] | None
          = None, category: str = "COVERAGE_GAP") -> ReviewItem:
    probabilities = {}
    if probs is not None:
        probabilities = dict(zip(("SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO"), probs,
                                 strict=True))
        probabilities |= {"threshold_support": 0.5, "threshold_contradict": 0.5}
    return ReviewItem(
        id=f"rv-{n:04d}", run_id="run-1", answer_id=f"a-{n}", question="Q?",
        answer_text=text, claim=Claim(id="c1", text=text),
        passages=[Passage(id=f"p{k}", doc_id=f"d{k}", text="Some passage.")
                  for k in range(passages)],
        category=category, probabilities=probabilities, priority=0.5,
        created_at=T0 + timedelta(minutes=n))


def _run(*args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result


def _said(result: Result) -> str:
    """The output with its line wrapping undone."""
    return " ".join(result.output.split())


@pytest.fixture
def reviewed(tmp_path: Path) -> Path:
    """A queue: 24 claims settled FACT, 24 HALLUCINATION, one each COVERAGE_GAP,
    JUDGMENT_ERROR and CANNOT_TELL, and one still open."""
    path = tmp_path / "runs.db"
    items, labels = [], []
    n = 0
    for rep in range(6):
        for label, texts in ((ReviewLabel.FACT, FACTS), (ReviewLabel.HALLUCINATION, FALSE)):
            for text in texts:
                n += 1
                items.append(_item(n, f"{text} ({rep})"))
                labels.append((f"rv-{n:04d}", label))
    for label in (ReviewLabel.COVERAGE_GAP, ReviewLabel.JUDGMENT_ERROR,
                  ReviewLabel.CANNOT_TELL, None):
        n += 1
        items.append(_item(n, f"Another claim {n}."))
        if label is not None:
            labels.append((f"rv-{n:04d}", label))
    with RunStore(path) as runs:
        queue = ReviewStore(runs)
        queue.add_items(items)
        for item_id, label in labels:
            queue.label(item_id, "dr-a", label)
    return path


def test_risk_examples_take_fact_and_hallucination_and_count_the_rest(reviewed: Path) -> None:
    with RunStore(reviewed) as runs:
        items = ReviewStore(runs).list(limit=None)
    examples, skipped = risk_examples(items)
    assert len(examples) == 48
    assert dict(skipped) == {"COVERAGE_GAP": 1, "JUDGMENT_ERROR": 1, "CANNOT_TELL": 1,
                             "not closed": 1}
    first = next(e for e in examples if e.id == "review:rv-0001")
    assert (first.text, first.question, first.label) == (f"{FACTS[0]} (0)", "Q?",
                                                         RiskLabel.FACT)
    assert first.provenance["source"] == "clinician_review"
    assert first.provenance["reviewer"] == "dr-a"
    assert first.provenance["judge_category"] == "COVERAGE_GAP"
    assert judged_example_id(items[0]).startswith("kb:run-1:")


def test_reviews_become_examples_features_and_a_classifier(reviewed: Path,
                                                           tmp_path: Path) -> None:
    examples = tmp_path / "reviewed.jsonl"
    out = _said(_run("risk", "data", "reviews", "--store", str(reviewed), "--out",
                     str(examples)))
    assert "wrote 48 examples" in out
    assert "CANNOT_TELL 1" in out and "not closed 1" in out
    assert {e.label for e in read_examples(examples)} == {RiskLabel.FACT,
                                                          RiskLabel.HALLUCINATION}
    model = f"hf:{build_tiny_lm(tmp_path / 'gpt2', 'gpt2')}"
    features = tmp_path / "features.jsonl"
    _run("risk", "features", str(examples), "--scorer", model, "--out", str(features))
    assert len(features.read_text("utf-8").splitlines()) == 48
    trained = _run("risk", "train", str(features), "--out", str(tmp_path / "clf"),
                   "--trees", "5")
    assert "ROC AUC" in trained.output
    assert (tmp_path / "clf" / "card.json").is_file()


def test_merge_lets_the_reviewed_label_replace_the_judges(reviewed: Path,
                                                          tmp_path: Path) -> None:
    with RunStore(reviewed) as runs:
        items = {i.id: i for i in ReviewStore(runs).list(limit=None)}
    judged = [
        # the judge called a claim FACT that the clinician settled HALLUCINATION
        LabeledExample(id=judged_example_id(items["rv-0005"]), text="x",
                       label=RiskLabel.FACT, provenance={"source": "kb_judge"}),
        # the clinician could not tell: the judge's example goes too
        LabeledExample(id=judged_example_id(items["rv-0051"]), text="y",
                       label=RiskLabel.HALLUCINATION, provenance={"source": "kb_judge"}),
        # the open item's claim, and an unreviewed one: kept
        LabeledExample(id=judged_example_id(items["rv-0052"]), text="z",
                       label=RiskLabel.FACT, provenance={"source": "kb_judge"}),
        LabeledExample(id="kb:run-9:a:c", text="w", label=RiskLabel.FACT),
    ]
    base = tmp_path / "kb.jsonl"
    write_examples(base, judged)
    merged = tmp_path / "merged.jsonl"
    out = _said(_run("risk", "data", "reviews", "--store", str(reviewed), "--merge",
                     str(base), "--out", str(merged)))
    assert "2 judge example(s)" in out
    ids = [e.id for e in read_examples(merged)]
    assert ids[:2] == [judged_example_id(items["rv-0052"]), "kb:run-9:a:c"]
    assert len(ids) == 50 and "review:rv-0005" in ids
    assert judged_example_id(items["rv-0005"]) not in ids


def _calibration_store(path: Path, n: int) -> Path:
    """Closed single-passage items whose probabilities separate the labels at 0.3."""
    items, labels = [], []
    cases = [((0.35, 0.05, 0.6), ReviewLabel.FACT), ((0.05, 0.35, 0.6),
                                                     ReviewLabel.HALLUCINATION),
             ((0.1, 0.1, 0.8), ReviewLabel.COVERAGE_GAP)]
    for k in range(n):
        probs, label = cases[k % 3]
        items.append(_item(k, f"Claim {k}.", probs=probs))
        labels.append((f"rv-{k:04d}", label))
    items.append(_item(n, "Two passages.", passages=2, probs=(0.9, 0.0, 0.1)))
    labels.append((f"rv-{n:04d}", ReviewLabel.FACT))
    items.append(_item(n + 1, "No probabilities."))
    labels.append((f"rv-{n + 1:04d}", ReviewLabel.FACT))
    with RunStore(path) as runs:
        queue = ReviewStore(runs)
        queue.add_items(items)
        for item_id, label in labels:
            queue.label(item_id, "dr-a", label)
        assert queue.counts().get(ReviewStatus.CLOSED.value) == n + 2
    return path


def test_calibrate_suggests_thresholds_from_single_passage_items(tmp_path: Path) -> None:
    db = _calibration_store(tmp_path / "runs.db", 36)
    out = _run("review", "calibrate", "--store", str(db)).output
    assert "usable: 36" in out
    assert "judged against several passages 1" in out
    assert "no built-in judge probabilities 1" in out
    assert "current:   support 0.500, contradict 0.500" in out
    suggested = out.split("suggested:")[1]
    support = float(suggested.split("support ")[1].split(",")[0])
    contradict = float(suggested.split("contradict ")[1].split(" ")[0])
    assert 0.1 < support <= 0.35 and 0.1 < contradict <= 0.35
    assert "macro-F1 1.000" in suggested


def test_calibrate_refuses_too_few_items(tmp_path: Path) -> None:
    db = _calibration_store(tmp_path / "runs.db", 6)
    result = _run("review", "calibrate", "--store", str(db), code=1)
    assert "not enough to calibrate" in result.output
