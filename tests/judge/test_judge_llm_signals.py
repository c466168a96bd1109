"""Reading P(true) from hand-made token lists (``medverify.judge.llm_signals``)."""

from __future__ import annotations

import math

import pytest

from medverify.judge.llm_signals import (
    Reading,
    agreement,
    object_spans,
    p_true,
    read_values,
    token_offsets,
    value_offsets,
    value_signals,
)
from medverify.llm.base import TokenLogprobs, TopLogprob
from medverify.records import Category


def _tok(token: str, top: dict[str, float] | None = None, logprob: float = -0.01
         ) -> TokenLogprobs:
    alternatives = [TopLogprob(token=t, logprob=math.log(p)) for t, p in (top or {}).items()]
    if top:
        logprob = alternatives[0].logprob
    return TokenLogprobs(token=token, logprob=logprob, top=alternatives)


REPLY = ('{"results": [{"claim_id": "C1", "factual": {"reasoning": "a {brace} \\"q\\"", '
         '"supported": true}, "counterfactual": {"contradicted":false}}]}')


def test_value_offsets_point_at_each_value_and_skip_braces_in_strings() -> None:
    where = value_offsets(REPLY)
    assert REPLY[where["C1"]["supported"]:].startswith("true}")
    assert REPLY[where["C1"]["contradicted"]:].startswith("false}")
    assert len(object_spans(REPLY, REPLY.find('"results"'))) == 1


def test_an_unclosed_reply_still_gives_the_values_it_has() -> None:
    cut = REPLY[: REPLY.index("\"contradicted\"")]
    assert value_offsets(cut) == {"C1": {"supported": REPLY.index("true}")}}


@pytest.mark.parametrize(("top", "expected"), [
    ({"true": 0.6, "false": 0.2, "null": 0.2}, 0.75),
    ({" true": 0.5, "True": 0.1, "\"false": 0.4}, 0.6),   # spaces, quotes and case
    ({"t": 0.3, "f": 0.1, "tr": 0.2, "fa": 0.2}, 0.625),  # prefixes of the words
    ({"true,": 0.5, "falsehood": 0.5}, 1.0),               # a longer word is not "false"
])
def test_p_true_sums_the_spellings(top: dict[str, float], expected: float) -> None:
    assert p_true(_tok(next(iter(top)), top)) == pytest.approx(expected)


def test_p_true_counts_the_chosen_token_once_and_refuses_neither_or_nan() -> None:
    chosen = TokenLogprobs(token="true", logprob=math.log(0.5),
                           top=[TopLogprob(token="false", logprob=math.log(0.5))])
    assert p_true(chosen) == pytest.approx(0.5)
    assert p_true(_tok("null", {"null": 0.9, "maybe": 0.1})) is None
    broken = TokenLogprobs(token="x", logprob=float("nan"),
                           top=[TopLogprob(token="true", logprob=float("nan"))])
    assert p_true(broken) is None


def test_read_values_on_tokens_that_spell_the_reply() -> None:
    head, tail = REPLY.split("true", 1)
    middle, end = tail.split("false", 1)
    tokens = [_tok(head), _tok("true", {"true": 0.9, "false": 0.1}), _tok(middle),
              _tok("false", {"false": 0.7, "true": 0.2, "no": 0.1}), _tok(end)]
    assert token_offsets(tokens)[0] == REPLY
    readings = read_values(REPLY, tokens)
    assert readings["C1"]["supported"] == Reading(True, pytest.approx(0.9))
    assert readings["C1"]["contradicted"] == Reading(False, pytest.approx(2 / 9))


def test_a_token_that_starts_before_the_value_is_read_from_the_value_on() -> None:
    head, tail = REPLY.split(' true', 1)
    tokens = [_tok(head), _tok(" true", {" true": 0.8, " false": 0.2}), _tok(tail)]
    readings = read_values(REPLY, tokens)
    assert readings["C1"]["supported"] == Reading(True, pytest.approx(0.8))


def test_no_tokens_or_unalignable_tokens_read_nothing() -> None:
    assert read_values(REPLY, None) == {}
    assert read_values(REPLY, []) == {}
    assert read_values(REPLY, [_tok("hello"), _tok(" world")]) == {}


def test_value_signals_keep_only_readings_of_the_parsed_value() -> None:
    readings = {"supported": Reading(True, 0.1234567), "contradicted": Reading(True, 0.9)}
    assert value_signals(readings, supported=True, contradicted=False) == {
        "p_supported": 0.123457}


def test_agreement_counts_the_first_reply_and_lost_samples_disagree() -> None:
    assert agreement(Category.FACT, []) == 1.0
    assert agreement(Category.FACT, [Category.FACT, None, Category.HALLUCINATION]) == 0.5
    assert agreement(Category.FACT, [Category.ERROR]) == 0.5
