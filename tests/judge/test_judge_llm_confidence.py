"""The generating LLM judge reports how sure it is: log-prob signals, self-consistency,
the one retry after a reply that is not JSON, and passages cited by their fence header."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Sequence

import pytest

from medverify.config import Config
from medverify.errors import ProviderError
from medverify.judge import JUDGES, JudgeItem
from medverify.judge.llm import (
    RETRY_NOTE,
    RETRY_TEMPERATURE,
    SAMPLE_TEMPERATURE,
    TOP_LOGPROBS,
    LLMJudge,
)
from medverify.llm.base import Completion, TokenLogprobs, TopLogprob
from medverify.llm.facade import Model
from medverify.records import Category, Claim, Passage, Verdict
from medverify.testing import ScriptedProvider

CLAIM = "Metformin is the first-line drug for type 2 diabetes."
PASSAGE = "Metformin is the first-line drug for type 2 diabetes in adults."
QUOTE = "Metformin is the first-line drug for type 2 diabetes"


def _items(count: int = 1) -> list[JudgeItem]:
    passage = Passage(id="p1", doc_id="d1", text=PASSAGE, title="Diabetes")
    return [JudgeItem(claim=Claim(id=f"c{i}", text=CLAIM), passages=[passage])
            for i in range(1, count + 1)]


def _entry(label: str, supported: bool, contradicted: bool = False,
           passage: str | None = "P1") -> dict[str, object]:
    return {"claim_id": label,
            "factual": {"reasoning": "The passage states it.", "supported": supported,
                        "passage": passage if supported else None,
                        "quote": QUOTE if supported else None},
            "counterfactual": {"negation": "Metformin is not first-line.",
                               "reasoning": "Nothing says otherwise.",
                               "contradicted": contradicted, "passage": None, "quote": None}}


def _reply(*entries: dict[str, object]) -> str:
    return json.dumps({"results": list(entries)})


def _with_logprobs(text: str, values: Sequence[dict[str, float]],
                   split: dict[str, list[str]] | None = None) -> Completion:
    """``text`` cut into word/space/punctuation tokens; the i-th ``true``/``false`` token
    (a value: the reasoning strings hold neither word) gets ``values[i]`` as its
    alternatives, its most likely one chosen. ``split`` cuts a value word into pieces, the
    alternatives given at the first piece."""
    tokens: list[TokenLogprobs] = []
    queue = list(values)
    for piece in re.findall(r"\s+|\w+|[^\w\s]", text):
        if piece in ("true", "false") and queue:
            probabilities = queue.pop(0)
            pieces = (split or {}).get(piece, [piece])
            top = [TopLogprob(token=t, logprob=math.log(p)) for t, p in probabilities.items()]
            tokens.append(TokenLogprobs(token=pieces[0], logprob=top[0].logprob, top=top))
            tokens += [TokenLogprobs(token=p, logprob=-0.01, top=[]) for p in pieces[1:]]
        else:
            tokens.append(TokenLogprobs(token=piece, logprob=-0.05, top=[]))
    return Completion(text=text, model="fake-model", logprobs=tokens)


def _judge(replies: list[object], **options: object) -> tuple[LLMJudge, ScriptedProvider]:
    provider = ScriptedProvider(replies)  # type: ignore[arg-type]
    return LLMJudge(Model(provider), **options), provider  # type: ignore[arg-type]


def _run(judge: LLMJudge, items: list[JudgeItem]) -> list[Verdict]:
    return asyncio.run(judge.judge(items))


def test_logprob_signals_are_read_at_each_claims_values() -> None:
    text = _reply(_entry("C1", True), _entry("C2", False))
    reply = _with_logprobs(text, [
        {"true": 0.8, "false": 0.15, "maybe": 0.05},   # C1 supported
        {"false": 0.9, " true": 0.1},                  # C1 contradicted
        {"false": 0.6, "true": 0.3, "null": 0.1},      # C2 supported
        {"false": 0.5, "\"true": 0.25, "tr": 0.25},    # C2 contradicted
    ])
    judge, provider = _judge([reply], logprobs=True)
    first, second = _run(judge, _items(2))
    assert first.category == Category.FACT
    assert first.signals == {"p_supported": round(0.8 / 0.95, 6), "p_contradicted": 0.1}
    assert second.signals == {"p_supported": round(0.3 / 0.9, 6), "p_contradicted": 0.5}
    assert provider.requests[0].top_logprobs == TOP_LOGPROBS


def test_a_value_split_over_tokens_is_read_at_its_first_token() -> None:
    text = _reply(_entry("C1", True))
    reply = _with_logprobs(text, [{"tr": 0.6, "fal": 0.3, " t": 0.1}, {"false": 0.7, "true": 0.3}],
                           split={"true": ["tr", "ue"]})
    judge, _ = _judge([reply], logprobs=True)
    [verdict] = _run(judge, _items())
    assert verdict.signals == {"p_supported": 0.7, "p_contradicted": 0.3}


def test_tokens_that_do_not_spell_the_reply_are_searched_in_their_own_text() -> None:
    text = _reply(_entry("C1", True))
    reply = _with_logprobs(text, [{"true": 0.9, "false": 0.1}, {"false": 0.8, "true": 0.2}])
    shifted = reply.model_copy(update={"text": "\n  " + text})  # the server added spaces
    judge, _ = _judge([shifted], logprobs=True)
    [verdict] = _run(judge, _items())
    assert verdict.category == Category.FACT
    assert verdict.signals == {"p_supported": 0.9, "p_contradicted": 0.2}


def test_missing_or_garbled_logprobs_give_no_signal_and_no_error() -> None:
    text = _reply(_entry("C1", True))
    garbled = Completion(text=text, model="m", logprobs=[
        TokenLogprobs(token="xyz", logprob=-0.1, top=[TopLogprob(token="true", logprob=-0.1)])])
    nan = _with_logprobs(text, [{"true": 0.9}, {"false": 0.9}]).model_copy()
    assert nan.logprobs is not None
    for token in nan.logprobs:
        token.top = [TopLogprob(token=t.token, logprob=float("nan")) for t in token.top]
    for reply in (text, garbled, nan):
        judge, _ = _judge([reply], logprobs=True)
        [verdict] = _run(judge, _items())
        assert verdict.category == Category.FACT and verdict.signals == {}


def test_logprobs_off_asks_for_none() -> None:
    judge, provider = _judge([_reply(_entry("C1", True))], logprobs=False)
    [verdict] = _run(judge, _items())
    assert verdict.signals == {} and provider.requests[0].top_logprobs is None


def test_the_registry_passes_logprobs_and_samples_through() -> None:
    config = Config.model_validate({"judge_settings": {"logprobs": False, "samples": 3}})
    judge = JUDGES.create("llm", config, Model(ScriptedProvider([])))
    assert isinstance(judge, LLMJudge) and judge.logprobs is False and judge.samples == 3


def test_self_consistency_records_the_share_that_agrees_with_the_first_reply() -> None:
    replies = [
        _reply(_entry("C1", True), _entry("C2", False)),    # first: FACT, COVERAGE_GAP
        _reply(_entry("C1", True), _entry("C2", True)),     # agrees on C1 only
        "not json", "still not json",                       # a sample lost: disagrees
        _reply(_entry("C1", False), _entry("C2", False)),   # agrees on C2 only
    ]
    judge, provider = _judge(replies, logprobs=False, samples=4)
    first, second = _run(judge, _items(2))
    assert first.category == Category.FACT
    assert first.signals == {"agreement": 0.5, "samples": 4.0}
    assert second.signals == {"agreement": 0.5, "samples": 4.0}
    temperatures = [r.temperature for r in provider.requests]
    seeds = [r.seed for r in provider.requests]
    assert temperatures == [0.0] + [SAMPLE_TEMPERATURE] * 4
    assert seeds == [None, 1, 2, 1002, 3]  # the retry of sample 2 samples anew


def test_samples_never_change_the_verdict() -> None:
    replies = [_reply(_entry("C1", True))] + [_reply(_entry("C1", False))] * 2
    judge, _ = _judge(replies, samples=3)
    [verdict] = _run(judge, _items())
    assert verdict.category == Category.FACT
    assert verdict.signals["agreement"] == round(1 / 3, 6)


@pytest.mark.parametrize("label", [
    "<<<F3a9c0d1e2f4b P1 | title: Diabetes | doc: d1", "<<<f3a9 P1 | title: Diab",
    "P1 | title: Diabetes", "[P1]", "<<<F3a9c0d1e2f4b P1>>>", "<<<Fddee3b183fe1 P1>>"])
def test_a_passage_cited_by_its_fence_header_resolves(label: str) -> None:
    judge, _ = _judge([_reply(_entry("C1", True, passage=label))])
    [verdict] = _run(judge, _items())
    assert verdict.category == Category.FACT and verdict.factual is not None
    assert verdict.factual.passage_id == "p1"


@pytest.mark.parametrize("label", [
    "P2 | title: Diabetes", "P1 P2 | title: Diabetes", "<<<F3a9 P7 | doc: d1",
    "P1 | title: Influenza", "P1 | doc: d9", "P1 and P2"])
def test_a_header_naming_an_unknown_or_second_label_or_another_passage_is_error(
        label: str) -> None:
    judge, _ = _judge([_reply(_entry("C1", True, passage=label))])
    [verdict] = _run(judge, _items())
    assert verdict.category == Category.ERROR
    assert "not shown to the judge" in (verdict.error or "")


def test_a_reply_that_is_not_json_is_asked_for_once_more() -> None:
    judge, provider = _judge(["Sure! Here it is: {results: [", _reply(_entry("C1", True))])
    [verdict] = _run(judge, _items())
    assert verdict.category == Category.FACT
    assert verdict.signals.get("json_retries") == 1.0
    retry = provider.requests[1].messages
    assert retry[-1].role == "user" and retry[-1].content == RETRY_NOTE
    assert retry[-2].role == "assistant" and retry[-2].content.startswith("Sure!")
    assert retry[:-2] == provider.requests[0].messages
    # at temperature 0 a model repeats its reply: the retry samples
    assert provider.requests[1].temperature == RETRY_TEMPERATURE
    assert provider.requests[1].seed == 1000


def test_a_trailing_comma_is_repaired_without_a_retry() -> None:
    reply = _reply(_entry("C1", True))
    broken = reply[:-2] + ",]}" if reply.endswith("]}") else reply
    assert broken != reply, reply
    judge, provider = _judge([broken])
    [verdict] = _run(judge, _items())
    assert verdict.category == Category.FACT and len(provider.requests) == 1


def test_a_second_reply_that_is_not_json_is_error_with_both_reasons() -> None:
    judge, provider = _judge(["no json here", "{\"results\": [ still broken"])
    [verdict] = _run(judge, _items())
    assert verdict.category == Category.ERROR and verdict.signals == {}
    assert len(provider.requests) == 2
    error = verdict.error or ""
    assert error.startswith("unparseable judge output:") and "asked again:" in error
    assert verdict.raw_output == "{\"results\": [ still broken"


def test_a_reply_of_the_wrong_shape_is_retried_too_but_a_bad_entry_is_not() -> None:
    judge, provider = _judge([json.dumps({"verdict": "FACT"}), json.dumps({"results": 3})])
    [verdict] = _run(judge, _items())
    assert verdict.category == Category.ERROR and len(provider.requests) == 2
    bad_entry = _reply({"claim_id": "C1", "factual": {"supported": "yes"}})
    judge, provider = _judge([bad_entry])
    [verdict] = _run(judge, _items())
    assert verdict.category == Category.ERROR and len(provider.requests) == 1


def test_a_server_that_refuses_logprobs_is_asked_without_them() -> None:
    refused = ProviderError("logprobs are not supported", status=400)
    judge, provider = _judge([refused, _reply(_entry("C1", True)), _reply(_entry("C1", True))],
                             logprobs=True)
    [first] = _run(judge, _items())
    [again] = _run(judge, _items())  # later calls do not ask again
    assert first.category == again.category == Category.FACT
    assert [r.top_logprobs for r in provider.requests] == [TOP_LOGPROBS, None, None]
    judge, _ = _judge([ProviderError("bad request", status=400)] * 2, logprobs=True)
    [verdict] = _run(judge, _items())
    assert verdict.category == Category.ERROR and "judge call failed" in (verdict.error or "")
