from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from medverify.config import Config
from medverify.errors import ConfigError
from medverify.judge import JUDGES, JudgeItem
from medverify.judge.builtin import BuiltinJudge
from medverify.judge.quotes import best_sentence, truncate_words
from medverify.records import Category, Claim, Passage
from medverify.testing.verifier import FailingVerifier, LexicalVerifier, TableVerifier

METFORMIN = Passage(
    id="met#0",
    doc_id="met",
    title="Metformin",
    text="Metformin is a first-line medicine for type 2 diabetes. The usual starting dose "
    "is 500 mg once or twice daily with meals.",
)
ASPIRIN = Passage(
    id="asp#0",
    doc_id="asp",
    title="Aspirin",
    text="Low-dose aspirin reduces the risk of heart attack in some adults.",
)


def _item(cid: str, text: str, *passages: Passage) -> JudgeItem:
    return JudgeItem(claim=Claim(id=cid, text=text), passages=list(passages))


def _judge(judge: BuiltinJudge, items: list[JudgeItem]):  # type: ignore[no-untyped-def]
    return asyncio.run(judge.judge(items))


# Claims share key content with the passages they are judged against: a passage about
# something else cannot contradict a claim (judge.decide's relevance rule).
BOTH = "Metformin medicine and low-dose aspirin reduce the risk of heart attack in type 2 diabetes."


def test_four_categories_from_thresholds_in_one_predict_call() -> None:
    fact = "Metformin is a first-line medicine for type 2 diabetes in adults."
    hall = "Metformin is never a medicine for type 2 diabetes."
    both, gap = BOTH, "gap"
    table = {
        (fact, METFORMIN.text): [0.9, 0.05, 0.05],
        (fact, ASPIRIN.text): [0.1, 0.1, 0.8],
        (hall, METFORMIN.text): [0.1, 0.7, 0.2],
        (both, METFORMIN.text): [0.55, 0.1, 0.35],
        (both, ASPIRIN.text): [0.1, 0.65, 0.25],
        (gap, ASPIRIN.text): [0.3, 0.3, 0.4],
    }
    verifier = TableVerifier(table)
    judge = BuiltinJudge(verifier)
    items = [
        _item("c1", fact, METFORMIN, ASPIRIN),
        _item("c2", hall, METFORMIN),
        _item("c3", both, METFORMIN, ASPIRIN),
        _item("c4", gap, ASPIRIN),
    ]
    verdicts = _judge(judge, items)
    assert verifier.calls == [6]  # every pair of the call in one batched predict
    assert [v.category for v in verdicts] == [
        Category.FACT,
        Category.HALLUCINATION,
        Category.JUDGMENT_ERROR,
        Category.COVERAGE_GAP,
    ]
    first = verdicts[0]
    assert first.judge == "builtin:table" and first.prompt_version is None
    assert first.factual is not None and first.factual.passage_id == "met#0"
    assert "P(supported)=0.90" in (first.factual.reason or "")
    assert "'Metformin'" in (first.factual.reason or "")
    assert first.probabilities is not None
    assert first.probabilities["SUPPORTED"] == pytest.approx(0.9)
    assert first.probabilities["NOT_ENOUGH_INFO"] == pytest.approx(0.8)
    raw = json.loads(first.raw_output or "{}")
    assert raw["passages"]["asp#0"]["NOT_ENOUGH_INFO"] == pytest.approx(0.8)
    assert verdicts[2].counterfactual is not None
    assert verdicts[2].counterfactual.passage_id == "asp#0"


def test_threshold_overrides_change_the_decision() -> None:
    table = {("c", METFORMIN.text): [0.55, 0.1, 0.35]}
    strict = BuiltinJudge(TableVerifier(table), support_threshold=0.6)
    assert _judge(strict, [_item("c1", "c", METFORMIN)])[0].category == Category.COVERAGE_GAP
    lenient = BuiltinJudge(TableVerifier(table), support_threshold=0.5)
    assert _judge(lenient, [_item("c1", "c", METFORMIN)])[0].category == Category.FACT


def test_quote_is_the_best_sentence_verbatim_and_found() -> None:
    judge = BuiltinJudge(LexicalVerifier())
    claim = "Metformin is a first-line medicine for type 2 diabetes."
    verdict = _judge(judge, [_item("c1", claim, METFORMIN)])[0]
    assert verdict.category == Category.FACT
    assert verdict.factual is not None
    assert verdict.factual.quote == "Metformin is a first-line medicine for type 2 diabetes."
    assert verdict.factual.quote_found is True
    assert verdict.counterfactual is not None and verdict.counterfactual.quote is None
    quiet = BuiltinJudge(LexicalVerifier(), quotes=False)
    unquoted = _judge(quiet, [_item("c1", claim, METFORMIN)])[0]
    assert unquoted.category == Category.FACT and unquoted.factual.quote is None  # type: ignore[union-attr]


def test_wrong_dose_is_contradicted_with_the_dose_sentence_quoted() -> None:
    judge = BuiltinJudge(LexicalVerifier())
    claim = "The usual starting dose of metformin is 5000 mg daily."
    verdict = _judge(judge, [_item("c1", claim, METFORMIN)])[0]
    assert verdict.category == Category.HALLUCINATION
    assert verdict.counterfactual is not None
    assert (verdict.counterfactual.quote or "").startswith("The usual starting dose is 500 mg")


def test_no_passages_is_a_coverage_gap_without_predict() -> None:
    verifier = LexicalVerifier()
    verdict = _judge(BuiltinJudge(verifier), [_item("c1", "anything")])[0]
    assert verdict.category == Category.COVERAGE_GAP
    assert verifier.calls == []
    assert "no evidence" in (verdict.factual.reason or "")  # type: ignore[union-attr]


def test_predict_failure_is_an_error_verdict_never_a_category() -> None:
    verdicts = _judge(BuiltinJudge(FailingVerifier()), [_item("c1", "x", METFORMIN)])
    assert verdicts[0].category == Category.ERROR
    assert "out of memory" in (verdicts[0].error or "")


def test_wrong_shape_from_the_verifier_is_an_error() -> None:
    class Short(TableVerifier):
        def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
            return np.zeros((1, 3), dtype=np.float32)

    verdicts = _judge(BuiltinJudge(Short({})), [_item("c1", "x", METFORMIN, ASPIRIN)])
    assert verdicts[0].category == Category.ERROR and "shape" in (verdicts[0].error or "")


def test_truncate_keeps_the_original_text_verbatim() -> None:
    text = "one  two\nthree " + " ".join(f"w{i}" for i in range(50))
    cut = truncate_words(text, 5)
    assert cut == "one  two\nthree w0 w1" and cut in text
    assert best_sentence("zzz", "") is None


def test_window_picks_the_region_of_the_quote() -> None:
    class Windows(LexicalVerifier):
        def predict_windows(self, claim: str, evidence: str):  # type: ignore[no-untyped-def]
            return [
                ("metformin is a first - line medicine", np.array([0.2, 0.1, 0.7])),
                ("the usual starting dose is 500 mg", np.array([0.95, 0.0, 0.05])),
            ]

    filler = " ".join(["Metformin is taken with meals by many people with diabetes."] * 20)
    long = METFORMIN.model_copy(update={"text": f"{METFORMIN.text} {filler}"})
    quote = BuiltinJudge(Windows())._quote("metformin medicine dose", long, 0)
    assert quote is not None and quote.startswith("The usual starting dose")
    # a passage that fits one window needs no second model pass: all sentences compete
    assert BuiltinJudge(Windows())._deciding_window("x", METFORMIN, 0) is None


def test_registry_and_options_from_config(tmp_path: Path) -> None:
    config = Config(judge_settings={"support_threshold": 0.7, "batch_size": 8})
    options = BuiltinJudge.config_options(config, None)
    judge = BuiltinJudge(**{**options, "verifier": LexicalVerifier()})
    assert isinstance(judge, BuiltinJudge)
    assert judge.support_threshold == 0.7 and judge.contradict_threshold == 0.6
    assert judge.batch_size == 8
    with pytest.raises(ConfigError, match="needs a model"):
        JUDGES.create("cascade", config, None)
    with pytest.raises(ConfigError, match="needs a model"):
        JUDGES.create("llm", Config(), None)


def test_shipped_verifier_judges_a_clear_case() -> None:
    weights = Path(__file__).resolve().parents[2] / "src" / "medverify" / "verifier" / "weights"
    if not (weights / "verifier.json").is_file():
        pytest.skip("no verifier weights shipped yet in src/medverify/verifier/weights/")
    judge = BuiltinJudge()
    claim = "Low-dose aspirin reduces the risk of heart attack in some adults."
    verdicts = _judge(judge, [_item("c1", claim, ASPIRIN, METFORMIN)])
    assert verdicts[0].ok, verdicts[0].error
    assert verdicts[0].judge.startswith("builtin:")
    assert verdicts[0].probabilities is not None
    assert verdicts[0].probabilities["SUPPORTED"] > verdicts[0].probabilities["CONTRADICTED"]


def test_missing_weights_is_a_config_error_that_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--model"):
        BuiltinJudge(path=tmp_path / "no-weights-here")


def test_a_claim_stated_verbatim_in_a_passage_is_supported_whatever_the_verifier_says() -> None:
    quote = "The usual starting dose is 500 mg once or twice daily with meals."
    partial = "The usual starting dose is 500 mg."
    table = {
        (quote, METFORMIN.text): [0.1, 0.8, 0.1],  # a weak verifier rejecting a quote
        (quote, ASPIRIN.text): [0.1, 0.1, 0.8],
        (partial, METFORMIN.text): [0.1, 0.8, 0.1],
    }
    judge = BuiltinJudge(TableVerifier(table))
    verbatim, cut = _judge(judge, [_item("q", quote, METFORMIN, ASPIRIN),
                                   _item("p", partial, METFORMIN)])
    assert verbatim.category == Category.FACT
    assert verbatim.factual is not None and "verbatim" in (verbatim.factual.reason or "")
    assert verbatim.probabilities is not None and verbatim.probabilities["CONTRADICTED"] == 0.1
    # part of a sentence is not a quote: the verifier decides (here: contradicted)
    assert cut.category == Category.HALLUCINATION


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        ("the usual starting dose is 500 mg once or twice daily with meals", True),
        ("Metformin is a first-line medicine for type 2 diabetes. The usual starting dose "
         "is 500 mg once or twice daily with meals.", True),
        ("The usual starting dose is 500 mg.", False),
        ("Metformin is a first-line medicine.", False),
        ("First-line.", False),
    ],
)
def test_is_verbatim_needs_whole_sentences(claim: str, expected: bool) -> None:
    from medverify.judge.quotes import is_verbatim

    assert is_verbatim(claim, METFORMIN.text) is expected


def test_each_passage_is_decided_on_its_own_before_the_claim() -> None:
    # One passage passing both thresholds decides for the larger label (the calibrated rule);
    # only two passages that disagree make a JUDGMENT_ERROR.
    one_text = "Metformin is the first-line medicine for type 2 diabetes in adults."
    table = {
        (one_text, METFORMIN.text): [0.8, 0.5, 0.0],
        (one_text, ASPIRIN.text): [0.1, 0.1, 0.8],
        (BOTH, METFORMIN.text): [0.8, 0.5, 0.0],
        (BOTH, ASPIRIN.text): [0.1, 0.6, 0.3],
    }
    judge = BuiltinJudge(TableVerifier(table), support_threshold=0.4, contradict_threshold=0.4)
    one, two = _judge(judge, [_item("c1", one_text, METFORMIN, ASPIRIN),
                              _item("c2", BOTH, METFORMIN, ASPIRIN)])
    assert one.category == Category.FACT
    assert one.counterfactual is not None and not one.counterfactual.holds
    assert "supported the claim more strongly" in (one.counterfactual.reason or "")
    assert two.category == Category.JUDGMENT_ERROR
    assert two.counterfactual is not None and two.counterfactual.passage_id == "asp#0"
    assert two.factual is not None and two.factual.passage_id == "met#0"


def test_a_verifier_scoring_in_other_arithmetic_gets_no_int8_fitted_confidence() -> None:
    """The shipped calibration names the verifier whose int8 scores it was fitted on; a
    verifier scoring in bfloat16 (scores_id ``+bf16``) must not borrow it: its verdicts
    carry no confidence, and its judge id says which scores they came from."""
    from medverify.judge.calibration import load_calibration

    shipped = load_calibration(None).verifier
    same = LexicalVerifier(id=shipped)
    assert BuiltinJudge(same).calibration == "general"
    assert BuiltinJudge(same).judge_id == f"builtin:{shipped}"
    other = LexicalVerifier(id=shipped)
    other.scores_id = f"{shipped}+bf16"  # type: ignore[attr-defined]
    judge = BuiltinJudge(other)
    assert judge.calibration is None and judge.judge_id == f"builtin:{shipped}+bf16"
    verdict = _judge(judge, [_item("c1", "Metformin treats type 2 diabetes.", METFORMIN)])[0]
    assert verdict.confidence is None


def test_each_arithmetic_gets_the_calibration_fitted_on_its_own_scores() -> None:
    """The int8 ONNX scoring ships its own fit (calibration-onnx-int8.json, named by the
    verifier's scores_id): a verifier scoring that way gets it, not the torch int8 one."""
    from medverify.judge.calibration import SHIPPED_SCORING, load_calibration

    shipped = load_calibration(None)
    onnx_fit = load_calibration(SHIPPED_SCORING["onnx_int8"])
    assert onnx_fit.verifier == f"{shipped.verifier}+onnx-int8"
    assert load_calibration(None, scores_id=onnx_fit.verifier) == onnx_fit
    assert load_calibration(None, scores_id=shipped.verifier) == shipped
    assert load_calibration(None, scores_id="another+weights") == shipped  # then refused
    verifier = LexicalVerifier(id=shipped.verifier)
    verifier.scores_id = onnx_fit.verifier  # type: ignore[attr-defined]
    judge = BuiltinJudge(verifier, family="citint")
    assert judge.family is onnx_fit.families["citint"]
    assert judge.family.thresholds != shipped.families["citint"].thresholds
    assert judge.judge_id == f"builtin:{onnx_fit.verifier}"
    auto = BuiltinJudge(verifier, family="auto").for_dataset("citint_dev")
    assert auto.family is onnx_fit.families["citint"]
