from __future__ import annotations

import json

import pytest

from medverify.errors import ParseError
from medverify.judge import JudgeItem
from medverify.judge.llm import parse_judge_output, plan_batches
from medverify.records import Category, Claim, Passage, Verdict
from medverify.verdict_rules import categorize
from test_quote_cases import HONEST, HOSTILE, QuoteCase

PASSAGES = {
    "P1": Passage(
        id="kb:1#0", doc_id="1", text="Metformin is first-line therapy for type 2 diabetes."
    ),
    "P2": Passage(id="kb:2#0", doc_id="2", text="The usual starting dose is 500 mg twice daily."),
}


def _entry(cid: str, supported: object, contradicted: object, **extra: object) -> dict:
    return {
        "claim_id": cid,
        "factual": {
            "reasoning": "r",
            "supported": supported,
            "passage": "P1",
            "quote": "Metformin is first-line therapy",
            **extra,
        },
        "counterfactual": {
            "negation": "n",
            "reasoning": "r2",
            "contradicted": contradicted,
            "passage": None,
            "quote": None,
        },
    }


@pytest.mark.parametrize(
    ("supported", "contradicted", "category"),
    [
        (True, False, Category.FACT),
        (False, True, Category.HALLUCINATION),
        (True, True, Category.JUDGMENT_ERROR),
        (False, False, Category.COVERAGE_GAP),
    ],
)
def test_categorize_four_ways(supported: bool, contradicted: bool, category: Category) -> None:
    assert categorize(supported, contradicted) is category


def test_parse_good_output_and_quote_check() -> None:
    raw = json.dumps({"results": [_entry("C1", True, False)]})
    parsed = parse_judge_output(raw, ["C1"], PASSAGES)
    factual, counterfactual = parsed["C1"]
    assert factual.holds and not counterfactual.holds
    assert factual.passage_id == "kb:1#0"
    assert factual.quote_found is True
    assert counterfactual.reason.startswith("Negation: n")


def test_parse_tolerates_json_fence() -> None:
    raw = "```json\n" + json.dumps({"results": [_entry("C1", False, False)]}) + "\n```"
    assert not isinstance(parse_judge_output(raw, ["C1"], PASSAGES)["C1"], str)


@pytest.mark.parametrize("raw", ["not json", '{"results": [', "[]", '{"result": []}', ""])
def test_unusable_output_raises(raw: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_judge_output(raw, ["C1"], PASSAGES)
    assert info.value.raw == raw


def test_unknown_label_and_missing_claim_are_errors_not_verdicts() -> None:
    raw = json.dumps({"results": [_entry("C1", "maybe", False), _entry("C9", True, False)]})
    parsed = parse_judge_output(raw, ["C1", "C2"], PASSAGES)
    assert isinstance(parsed["C1"], str) and "true or false" in parsed["C1"]
    assert parsed["C2"] == "no result for this claim"


def test_duplicate_results_are_an_error() -> None:
    raw = json.dumps({"results": [_entry("C1", True, False), _entry("C1", False, True)]})
    assert parse_judge_output(raw, ["C1"], PASSAGES)["C1"] == "duplicate results for this claim"


def test_invented_quote_is_flagged_and_not_counted() -> None:
    entry = _entry("C1", True, False)
    entry["factual"]["quote"] = "metformin cures diabetes"
    factual, _ = parse_judge_output(json.dumps({"results": [entry]}), ["C1"], PASSAGES)["C1"]
    assert factual.quote_found is False
    assert factual.verified is False and not factual.counts
    assert factual.shown_quote is None


def test_unknown_passage_label_is_an_error() -> None:
    entry = _entry("C1", True, False)
    entry["factual"]["passage"] = "P77"
    parsed = parse_judge_output(json.dumps({"results": [entry]}), ["C1"], PASSAGES)["C1"]
    assert isinstance(parsed, str) and "P77" in parsed and "not shown" in parsed


def _item(cid: str, *pids: str) -> JudgeItem:
    return JudgeItem(
        claim=Claim(id=cid, text=cid), passages=[Passage(id=p, doc_id=p, text=p) for p in pids]
    )


def test_batches_group_claims_with_shared_evidence() -> None:
    items = [
        _item("c1", "a", "b"),
        _item("c2", "a", "b"),
        _item("c3", "x", "y", "z"),
        _item("c4"),
        _item("c5", "x", "y"),
    ]
    batches = plan_batches(items, claims_per_call=4, max_passages=4)
    assert [[i for i, _ in b.items] for b in batches] == [[0, 1], [2, 4]]
    assert list(batches[0].passages) == ["a", "b"]


def test_batches_respect_claims_per_call() -> None:
    items = [_item(f"c{i}", "a") for i in range(5)]
    sizes = [len(b.items) for b in plan_batches(items, claims_per_call=2, max_passages=10)]
    assert sizes == [2, 2, 1]


# -- issue 27: evidence a hostile judge cannot fake --------------------------------------


def _parse_case(case: QuoteCase) -> tuple[object, object] | str:
    passages = {"P1": Passage(id="kb:9#0", doc_id="9", text=case.passage)}
    return parse_judge_output(case.reply(), ["C1"], passages, {"C1": case.claim})["C1"]


@pytest.mark.parametrize("case", [c for c in HOSTILE if c.raw is None], ids=lambda c: c.name)
def test_a_hostile_reply_never_makes_a_fact(case: QuoteCase) -> None:
    factual, counterfactual = _parse_case(case)
    verdict = Verdict(claim_id="C1", factual=factual, counterfactual=counterfactual)
    assert verdict.category is not Category.FACT
    assert verdict.category is not Category.HALLUCINATION
    held = factual if case.supported else counterfactual
    assert held.holds and held.verified is False and not held.counts
    assert case.expect in (held.quote_problem or ""), held.quote_problem


@pytest.mark.parametrize("case", HONEST, ids=lambda c: c.name)
def test_an_honest_reply_still_counts(case: QuoteCase) -> None:
    factual, counterfactual = _parse_case(case)
    verdict = Verdict(claim_id="C1", factual=factual, counterfactual=counterfactual)
    assert verdict.category is case.category
    held = factual if case.supported else counterfactual
    assert held.verified is True and held.quote_problem is None and held.quote_found is True


def test_duplicate_keys_make_the_reply_unusable_with_the_cause() -> None:
    [case] = [c for c in HOSTILE if c.name == "duplicate_keys"]
    raw = case.reply()
    with pytest.raises(ParseError) as info:
        parse_judge_output(raw, ["C1"], PASSAGES, {"C1": case.claim})
    assert "duplicate key 'supported' in a JSON object" in str(info.value)
    assert info.value.raw == raw


@pytest.mark.parametrize(
    "raw",
    [
        '{"results": [], "results": []}',
        '{"results": [{"claim_id": "C1", "claim_id": "C2"}]}',
        '{"results": [{"claim_id": "C1", "factual": {"quote": "a", "quote": "b"}}]}',
        '{"results": [{"claim_id": "C1", "factual": {"supported": true, "supported": true}}]}',
        '{"results": [{"claim_id": "C1", "factual": {"s\\u0075pported": 1, "supported": 2}}]}',
    ],
)
def test_any_duplicate_key_at_any_depth_is_a_parse_error(raw: str) -> None:
    with pytest.raises(ParseError, match="duplicate key"):
        parse_judge_output(raw, ["C1"], PASSAGES)


def test_the_same_key_in_sibling_objects_is_fine() -> None:
    raw = json.dumps({"results": [_entry("C1", True, False), _entry("C2", False, False)]})
    parsed = parse_judge_output(raw, ["C1", "C2"], PASSAGES)
    assert not isinstance(parsed["C1"], str) and not isinstance(parsed["C2"], str)


def test_without_claim_texts_the_content_rule_is_not_applied() -> None:
    """Callers that pass no claim texts keep the shape, place and cut rules only."""
    entry = _entry("C1", True, False)
    entry["factual"]["passage"] = "P2"
    entry["factual"]["quote"] = "The usual starting dose is 500 mg"
    raw = json.dumps({"results": [entry]})
    factual, _ = parse_judge_output(raw, ["C1"], PASSAGES)["C1"]
    assert factual.verified is True
    claims = {"C1": "Metformin cures type 1 diabetes in one week."}
    factual, _ = parse_judge_output(raw, ["C1"], PASSAGES, claims)["C1"]
    assert factual.verified is False and "too little" in (factual.quote_problem or "")
