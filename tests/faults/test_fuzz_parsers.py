"""Property-based fuzzing of every parser of model output (except the LLM judge's).

Properties, for each parser: nothing but the project's own error type escapes (and only
where the API raises one), and nothing is taken from invalid output: a reply that is not
one strict JSON value gives ParseError / an error record / an unscored result, with the raw
output kept. The replies are mostly near-valid (see ``_fuzz.py``). Example counts are fixed
(``FUZZ``: 300, ``FUZZ_SMALL``: 150) and derandomized.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from medverify.audit.cleanup import parse_cleanup_reply
from medverify.bench import ask
from medverify.bench.generate import MAX_QUESTION_CHARS, QuestionGenerator, parse_question
from medverify.bench.records import GenerationStatus, ReplyStatus
from medverify.decompose import LLMDecomposer, parse_reply
from medverify.errors import ParseError, ProviderError
from medverify.factcheck.rewrite import LLMRewriter, parse_rewrite_reply, rewrite_answer
from medverify.factcheck.trace import LLMTracer, parse_trace_reply
from medverify.llm import Completion, Message, Model
from medverify.llm import openai_compat as oc
from medverify.llm.base import ChatRequest, TokenLogprobs, TopLogprob, scrub_surrogates
from medverify.prompts.untrusted import load_json_reply
from medverify.records import Answer, Document, Passage
from medverify.risk.api_variant import parse_rephrasings, score_completion
from medverify.risk.data import CounterfactualGenerator, parse_counterfactual
from medverify.testing import ScriptedProvider

from ._fuzz import FUZZ, FUZZ_SMALL, json_values, replies, strict_json, texts, utf8_safe

short_texts = st.text(min_size=1, max_size=30)
labels = st.sampled_from(["P1", "P2", "P3", "P9", "p1", "", "P1 "])

PASSAGES = {f"P{i}": Passage(id=f"doc{i}#0", doc_id=f"doc{i}", text=f"Passage {i} text.")
            for i in (1, 2, 3)}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def model_replying(raw: str) -> Model:
    return Model(ScriptedProvider(lambda request: raw))


def expect_parse_error(exc: ParseError, raw: str) -> None:
    assert exc.raw == raw, "a ParseError must keep the raw output"
    assert str(exc)


# -- prompts/untrusted.py: the shared JSON reply loader ---------------------------------------

@FUZZ
@given(replies())
def test_load_json_reply_is_strict_or_parse_error(raw: str) -> None:
    ok, expected = strict_json(raw)
    try:
        value = load_json_reply(raw)
    except ParseError as exc:
        expect_parse_error(exc, raw)
        assert not ok
        return
    assert ok
    assert json.dumps(value, allow_nan=True) == json.dumps(expected, allow_nan=True)


# -- decompose.py ---------------------------------------------------------------------------

CLAIM = {"text": texts, "sentence": st.integers(-2, 3),
         "markers": st.lists(st.one_of(st.integers(0, 9), short_texts), max_size=3)}
DECOMPOSE = {"claims": st.lists(st.fixed_dictionaries(CLAIM), max_size=3)}


@FUZZ
@given(replies(DECOMPOSE))
def test_decomposer_reply(raw: str) -> None:
    try:
        claims = parse_reply(raw)
    except ParseError as exc:
        expect_parse_error(exc, raw)
        return
    ok, value = strict_json(raw)
    assert ok and isinstance(value, dict) and isinstance(value["claims"], list)
    for claim in claims:
        assert isinstance(claim.text, str) and type(claim.sentence) is int


ANSWER = Answer(text="Aspirin thins the blood [1]. Metformin lowers glucose.")


@FUZZ_SMALL
@given(replies(DECOMPOSE))
def test_llm_decomposer_end_to_end(raw: str) -> None:
    raw = scrub_surrogates(raw)  # the model facade scrubs every reply
    decomposer = LLMDecomposer(model_replying(raw))
    try:
        claims = run(decomposer.decompose(ANSWER))
    except ParseError as exc:
        expect_parse_error(exc, raw)
        return
    assert strict_json(raw)[0]
    for claim in claims:
        assert claim.text.strip()
        assert claim.span is not None
        assert 0 <= claim.span.start <= claim.span.end <= len(ANSWER.text)


# -- audit/cleanup.py -----------------------------------------------------------------------

CLEANUP = {"action": st.sampled_from(["rewrite", "remove", "Rewrite", "keep"]),
           "statement": st.one_of(texts, st.none()), "reason": st.one_of(texts, st.none())}


@FUZZ
@given(replies(CLEANUP))
def test_cleanup_reply(raw: str) -> None:
    try:
        action, statement, reason = parse_cleanup_reply(raw)
    except ParseError as exc:
        expect_parse_error(exc, raw)
        return
    ok, value = strict_json(raw)
    assert ok and isinstance(value, dict) and value["action"] == action
    assert action in ("rewrite", "remove")
    if action == "rewrite":
        assert isinstance(statement, str) and statement.strip() == statement and statement
    else:
        assert statement is None
    assert reason is None or isinstance(reason, str)


# -- factcheck/rewrite.py -------------------------------------------------------------------

FACT_IDS = ["f1", "f2"]
REWRITE_ENTRY = {"id": st.sampled_from([*FACT_IDS, "f3", ""]), "rewritten": texts,
                 "passage": labels}
REWRITE = {"facts": st.lists(st.fixed_dictionaries(REWRITE_ENTRY), max_size=4)}


@FUZZ
@given(replies(REWRITE))
def test_rewrite_reply(raw: str) -> None:
    try:
        parsed = parse_rewrite_reply(raw, FACT_IDS)
    except ParseError as exc:
        expect_parse_error(exc, raw)
        return
    ok, value = strict_json(raw)
    assert ok and isinstance(value, dict) and isinstance(value["facts"], list)
    assert sorted(parsed) == FACT_IDS
    for entry in parsed.values():
        if isinstance(entry, tuple):
            text, label = entry
            assert isinstance(text, str) and text.strip()
            assert label is None or isinstance(label, str)
        else:
            assert isinstance(entry, str) and entry  # what was wrong with it


@FUZZ_SMALL
@given(replies(REWRITE))
def test_llm_rewriter_end_to_end(raw: str) -> None:
    raw = scrub_surrogates(raw)  # the model facade scrubs every reply
    rewriter = LLMRewriter(model_replying(raw))
    passage = PASSAGES["P1"]
    items = [("f1", "Aspirin is safe in children.", [passage]),
             ("f2", "Metformin causes weight gain.", [passage])]
    rewrites = run(rewriter.rewrite(items))
    assert [r.before for r in rewrites] == [text for _, text, _ in items]
    for rewrite in rewrites:
        if rewrite.error is not None:
            assert rewrite.after is None
        else:
            assert strict_json(raw)[0] and rewrite.raw_output == raw
            assert rewrite.after and rewrite.after.strip()
        if rewrite.error is not None and "call failed" not in rewrite.error:
            assert rewrite.raw_output == raw
        if utf8_safe(raw):
            rewrite.model_dump_json()


@FUZZ_SMALL
@given(replies({"answer": texts}))
def test_rewrite_answer(raw: str) -> None:
    raw = scrub_surrogates(raw)  # the model facade scrubs every reply
    try:
        text, kept = run(rewrite_answer(model_replying(raw), "q?", "An answer.", []))
    except ParseError as exc:
        expect_parse_error(exc, raw)
        return
    ok, value = strict_json(raw)
    assert ok and kept == raw and text == value["answer"].strip() and text


# -- factcheck/trace.py ---------------------------------------------------------------------

TRACE = {"reasoning": st.one_of(texts, st.none()), "best": st.one_of(labels, st.none()),
         "top3": st.lists(labels, max_size=4)}


@FUZZ
@given(replies(TRACE))
def test_trace_reply(raw: str) -> None:
    try:
        trace = parse_trace_reply(raw, PASSAGES)
    except ParseError as exc:
        expect_parse_error(exc, raw)
        return
    assert strict_json(raw)[0] and trace.raw_output == raw and trace.error is None
    ids = {p.id for p in PASSAGES.values()}
    assert trace.best_passage_id is None or trace.best_passage_id in ids
    assert {c.passage_id for c in trace.candidates} <= ids
    if trace.best_passage_id is not None:
        assert trace.candidates[0].passage_id == trace.best_passage_id


@FUZZ_SMALL
@given(replies(TRACE))
def test_llm_tracer_end_to_end(raw: str) -> None:
    raw = scrub_surrogates(raw)  # the model facade scrubs every reply
    trace = run(LLMTracer(model_replying(raw)).trace("Aspirin thins blood.",
                                                     list(PASSAGES.values())))
    if trace.error is not None:
        assert trace.raw_output == raw
        assert trace.best_passage_id is None and trace.candidates == []
    else:
        assert strict_json(raw)[0]


# -- risk/data.py: the counterfactual generator ---------------------------------------------

COUNTERFACTUAL = {"false_text": texts, "change": texts}


@FUZZ
@given(replies(COUNTERFACTUAL))
def test_counterfactual_reply(raw: str) -> None:
    try:
        reply = parse_counterfactual(raw)
    except ParseError as exc:
        expect_parse_error(exc, raw)
        return
    ok, value = strict_json(raw)
    assert ok and set(value) == {"false_text", "change"}
    assert reply.false_text.strip() and reply.change.strip()


@FUZZ_SMALL
@given(replies(COUNTERFACTUAL))
def test_counterfactual_generator_end_to_end(raw: str) -> None:
    raw = scrub_surrogates(raw)  # the model facade scrubs every reply
    generator = CounterfactualGenerator(model_replying(raw))
    original = "Adults take 500 mg of metformin twice daily."
    made = run(generator.generate([("e1", "dose?", original)]))
    assert len(made) + len(generator.rejects) == 1
    if made:
        assert strict_json(raw)[0]
        assert made[0].label.value == "HALLUCINATION" and made[0].text != original
    else:
        [reject] = generator.rejects
        assert reject.raw == raw and reject.detail


# -- risk/api_variant.py: rephrasings and the yes/no judge ----------------------------------

@FUZZ
@given(replies(valid=st.lists(texts, max_size=6)), st.integers(0, 5))
def test_rephrasings(raw: str, wanted: int) -> None:
    question = "Is aspirin safe?"
    result = parse_rephrasings(raw, question, wanted)
    assert len(result.questions) <= wanted
    assert result.invalid == wanted - len(result.questions) and result.requested == wanted
    folded = [q.casefold() for q in result.questions]
    assert len(set(folded)) == len(folded) and question.casefold() not in folded
    assert all(q == q.strip() and q for q in result.questions)
    if result.questions:
        ok, value = strict_json(raw)
        assert ok and isinstance(value, list)
    if not strict_json(raw)[0]:
        assert result.error and not result.questions


logprob_values = st.one_of(st.floats(min_value=-1e6, max_value=0.0),
                           st.sampled_from([0.0, -0.0, oc.LOGPROB_FLOOR, -1e-300]))
tokens = st.one_of(st.sampled_from(["yes", "Yes", " no", "No.", "\u2581yes", "maybe", ""]),
                   texts)
top_logprobs = st.lists(st.builds(TopLogprob, token=tokens, logprob=logprob_values),
                        max_size=8)
token_logprobs = st.builds(TokenLogprobs, token=tokens, logprob=logprob_values,
                           top=top_logprobs)


@FUZZ
@given(st.one_of(st.none(), st.lists(token_logprobs, max_size=3)), texts)
def test_risk_judge_scores_only_yes_no(logprobs: list[TokenLogprobs] | None,
                                       text: str) -> None:
    completion = Completion(text=text, model="m", logprobs=logprobs)
    score = score_completion("original", "q?", completion)
    if not logprobs:
        assert score.error and score.p_yes is None
        return
    first = logprobs[0]
    words = [t.token for t in first.top] or [first.token]
    has_yes_no = any(w.strip(" .\u2581").casefold() in ("yes", "no") for w in words)
    if score.p_yes is not None:
        assert 0.0 <= score.p_yes <= 1.0 and has_yes_no
    assert score.entropy is not None and math.isfinite(score.entropy) and score.entropy >= 0


# -- bench/ask.py: answers, source lists, the URL fallback, refusals -------------------------

SOURCE_ENTRY = st.one_of(
    texts, st.sampled_from(["https://a.org/x", "http://b.org", "ftp://c.org", "a.org/x"]),
    st.fixed_dictionaries({"url": texts, "title": texts}),
)
BENCH = {"answer": st.one_of(texts, st.lists(texts, max_size=3)),
         "sources": st.one_of(st.lists(SOURCE_ENTRY, max_size=6), texts)}


@FUZZ
@given(replies(BENCH))
def test_bench_reply(raw: str) -> None:
    parsed = ask.parse_reply(raw)
    assert isinstance(parsed.status, ReplyStatus) and parsed.status != ReplyStatus.ERROR
    urls = [s.url for s in parsed.sources]
    assert len(urls) == len(set(urls)) <= ask.MAX_SOURCES
    assert all(u.startswith(("http://", "https://")) for u in urls)
    assert [s.id for s in parsed.sources] == [str(i) for i in range(1, len(urls) + 1)]
    assert parsed.duplicate_urls >= 0 and parsed.dropped_urls >= 0
    if parsed.status == ReplyStatus.OK:
        assert parsed.answer and parsed.sources and parsed.parsed_from == "json"
    if parsed.status in (ReplyStatus.NO_SOURCES, ReplyStatus.REFUSAL):
        assert not parsed.sources
    if not raw.strip():
        assert parsed.status == ReplyStatus.EMPTY


@FUZZ
@given(st.one_of(texts, st.lists(texts, max_size=6).map("\n".join)))
def test_bench_text_helpers(text: str) -> None:
    assert isinstance(ask.is_refusal(text), bool)
    assert isinstance(ask.strip_url_list(text), str)
    url = ask.http_url(text)
    assert url is None or url.startswith(("http://", "https://"))


def test_bench_refusal_detection_examples() -> None:
    assert ask.is_refusal("I'm sorry, but I cannot provide medical advice. "
                          "Please consult your doctor.")
    assert not ask.is_refusal("I cannot provide a dose, but adults usually take 500 mg.")
    assert ask.parse_reply('{"answer": "1' + "1" * 5000).status != ReplyStatus.OK


# -- bench/generate.py ----------------------------------------------------------------------

QUESTION = {"question": st.one_of(texts, st.sampled_from(
    ["What is the usual dose of metformin?", "What does the document say?", "x" * 700]))}


@FUZZ
@given(replies(QUESTION))
def test_question_reply(raw: str) -> None:
    try:
        question = parse_question(raw)
    except ParseError as exc:
        expect_parse_error(exc, raw)
        return
    ok, value = strict_json(raw)
    assert ok and list(value) == ["question"]
    assert question and len(question) <= MAX_QUESTION_CHARS
    assert question == " ".join(question.split())


@FUZZ_SMALL
@given(replies(QUESTION))
def test_question_generator_end_to_end(raw: str) -> None:
    raw = scrub_surrogates(raw)  # the model facade scrubs every reply
    generator = QuestionGenerator(model_replying(raw))
    document = Document(doc_id="d1", text="Metformin is first-line for type 2 diabetes.")
    result = run(generator.generate_one(document, source="fuzz"))
    assert result.raw_output == raw
    if result.status == GenerationStatus.OK:
        assert result.question is not None and strict_json(raw)[0]
    else:
        assert result.status == GenerationStatus.INVALID
        assert result.question is None and result.error
    if utf8_safe(raw):
        result.model_dump_json()  # what `bench questions generate` appends to its file


# -- llm/openai_compat.py: HTTP bodies ------------------------------------------------------

REQUEST = ChatRequest(model="m", messages=(Message(role="user", content="hi"),),
                      top_logprobs=3)
URL = "http://127.0.0.1:1/v1/chat/completions"

LOGPROB_ITEM = {"token": tokens, "logprob": st.one_of(logprob_values, json_values),
                "top_logprobs": st.lists(st.fixed_dictionaries(
                    {"token": tokens, "logprob": st.one_of(logprob_values, json_values)}),
                    max_size=3)}
CHOICE = {"message": st.fixed_dictionaries({"role": st.just("assistant"), "content": texts}),
          "finish_reason": st.sampled_from(["stop", "length", None]),
          "logprobs": st.one_of(
              st.none(), json_values,
              st.fixed_dictionaries({"content": st.one_of(
                  st.lists(st.fixed_dictionaries(LOGPROB_ITEM), max_size=3), json_values)}))}
BODY = {"choices": st.lists(st.fixed_dictionaries(CHOICE), max_size=2),
        "model": texts,
        "usage": st.one_of(json_values, st.fixed_dictionaries(
            {"prompt_tokens": st.one_of(st.integers(0, 99), json_values),
             "completion_tokens": st.one_of(st.integers(0, 99), json_values)}))}


def _body_bytes(raw: str, how: int) -> bytes:
    data = raw.encode("utf-8", "surrogatepass")
    if how == 1:
        return raw.encode("latin-1", "replace")
    if how == 2 and data:
        return data[:-1] + b"\xff"
    return data


@FUZZ
@given(replies(BODY), st.integers(0, 2))
def test_openai_compat_body(raw: str, how: int) -> None:
    response = httpx.Response(200, content=_body_bytes(raw, how),
                              headers={"content-type": "application/json"})
    try:
        data = oc._json_body(response, URL)
        completion = oc._completion(data, REQUEST, URL, 0.01)
    except ProviderError as exc:
        assert not exc.retryable and "malformed reply" in str(exc)
        return
    assert isinstance(completion.text, str)
    choice = data["choices"][0]
    content = choice["message"].get("content")
    assert completion.text == (scrub_surrogates(content) if content else "")
    # the completion must be storable: the request cache and the run store write it as JSON
    Completion.model_validate_json(completion.model_dump_json())
    for step in completion.logprobs or []:
        assert -9999.0 <= step.logprob <= 0.0
        assert all(-9999.0 <= alt.logprob <= 0.0 for alt in step.top)


@pytest.mark.parametrize("body", [
    b"", b"null", b"[]", b'{"choices": []}', b'{"choices": [null]}',
    b'{"choices": [{"message": "hi"}]}', b'{"choices": [{"message": {"content": 5}}]}',
    b'{"choices": "abc"}', b"[" * 5000, b'{"choices": [{"message": {"content": "a"}}]}' * 2,
    b'{"x": ' + b"1" * 5000 + b"}", b"\xff\xfe\x00", b'{"choices": [{"message": {"con',
])
def test_openai_compat_malformed_bodies(body: bytes) -> None:
    response = httpx.Response(200, content=body)
    with pytest.raises(ProviderError, match="malformed reply"):
        oc._completion(oc._json_body(response, URL), REQUEST, URL, 0.01)


@pytest.mark.parametrize("logprobs", [
    "abc", 5, [1, 2], [{"token": "yes"}], [{"token": "yes", "logprob": "x"}],
    [{"token": "yes", "logprob": 10 ** 400}], [{"token": "yes", "logprob": float("nan")}],
    [{"token": "yes", "logprob": 0.5}], [{"token": "yes", "logprob": -1, "top_logprobs": 3}],
    [{"token": "yes", "logprob": -1, "top_logprobs": [{"token": "no"}]}],
])
def test_openai_compat_odd_logprobs_are_none(logprobs: Any) -> None:
    data = {"choices": [{"message": {"content": "yes"}, "logprobs": {"content": logprobs}}]}
    completion = oc._completion(data, REQUEST, URL, 0.01)
    assert completion.text == "yes" and completion.logprobs is None


def test_openai_compat_lone_surrogates_are_replaced() -> None:
    body = b'{"model": "m\\udc00", "choices": [{"message": {"content": "a\\ud800b"}, ' \
        b'"logprobs": {"content": [{"token": "\\ud800", "logprob": -1}]}}]}'
    data = oc._json_body(httpx.Response(200, content=body), URL)
    completion = oc._completion(data, REQUEST, URL, 0.01)
    assert completion.text == "a\ufffdb" and completion.model == "m\ufffd"
    assert completion.logprobs and completion.logprobs[0].token == "\ufffd"
    completion.model_dump_json()


def test_openai_compat_odd_usage_is_estimated() -> None:
    for usage in ({"prompt_tokens": 3, "completion_tokens": "many"},
                  {"prompt_tokens": 3, "completion_tokens": [1]}, {"prompt_tokens": "3"}):
        data = {"choices": [{"message": {"content": "abcd"}}], "usage": usage}
        assert oc._completion(data, REQUEST, URL, 0.01).usage.estimated
