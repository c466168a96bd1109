"""Asking one model one benchmark question: parsing, retries, statuses, bad replies."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from medverify.bench.ask import Asker, CallClock, is_refusal, parse_reply, strip_url_list
from medverify.bench.records import ModelReply, Question, ReplyStatus
from medverify.config import BenchSettings, ModelSettings
from medverify.errors import ProviderError
from medverify.llm.base import ChatRequest, Completion, TokenCount
from medverify.llm.facade import get_model
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.fake_provider import Reply

QUESTION = Question(id="q1", text="Does aspirin thin the blood?", source="test")
SETTINGS = ModelSettings(max_retries=0, backoff_s=0.0)


def _json(answer: str, sources: list[object], key: str = "sources") -> str:
    return json.dumps({"answer": answer, key: sources})


@pytest.fixture
def fakes() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        unregister_fake(name)


def _asker(fakes: list[str], replies: list[Reply], *, retries: int = 1,
           cache: Path | None = None, delay_s: float = 0.0,
           name: str = "asked") -> tuple[Asker, ScriptedProvider]:
    fake = register_fake(name, ScriptedProvider(replies, name=name, delay_s=delay_s))
    fakes.append(name)
    model = get_model(f"fake:{name}", SETTINGS, cache_path=cache)
    settings = BenchSettings(retries=retries, max_tokens=300, temperature=0.3)
    return Asker(model, "m1", settings=settings), fake


def _ask(asker: Asker, question: Question = QUESTION) -> ModelReply:
    async def go() -> ModelReply:
        try:
            return await asker.ask(question)
        finally:
            await asker.model.aclose()

    return asyncio.run(go())


def test_a_valid_json_reply(fakes: list[str]) -> None:
    raw = _json("Aspirin thins the blood.", [
        {"url": "https://Example.org/aspirin#top", "title": "Aspirin"},
        {"url": "https://nih.gov/a", "title": "NIH"},
    ])
    asker, fake = _asker(fakes, [raw])
    reply = _ask(asker)
    assert reply.status == ReplyStatus.OK and reply.parsed_from == "json"
    assert reply.answer == "Aspirin thins the blood."
    assert [(s.id, s.url, s.title) for s in reply.sources] == [
        ("1", "https://example.org/aspirin", "Aspirin"), ("2", "https://nih.gov/a", "NIH")]
    assert (reply.model, reply.spec, reply.question_id) == ("m1", "fake:asked", "q1")
    assert reply.prompt_version == "bench_answer/v1" and reply.answer_id == "m1::q1"
    [attempt] = reply.attempts
    assert attempt.raw == raw and attempt.problem is None and attempt.prompt_tokens > 0
    assert attempt.finish_reason == "stop" and attempt.cached is False
    [request] = fake.requests
    assert request.json_mode and request.max_tokens == 300 and request.temperature == 0.3
    assert QUESTION.text in request.messages[-1].content
    assert asker.model.usage["bench_answer:m1"].calls == 1


def test_fenced_json_after_prose_and_other_source_keys(fakes: list[str]) -> None:
    raw = ("Here is my answer:\n```json\n"
           + _json("Yes.", ["https://a.org/x", "www.b.org/y"], key="references") + "\n```")
    asker, _ = _asker(fakes, [raw])
    reply = _ask(asker)
    assert reply.status == ReplyStatus.OK and reply.answer == "Yes."
    assert [s.url for s in reply.sources] == ["https://a.org/x", "https://www.b.org/y"]


@pytest.mark.parametrize("key", ["citations", "urls", "links", "Sources"])
def test_source_list_keys(key: str) -> None:
    parsed = parse_reply(_json("Yes.", [{"link": "https://a.org/x"}], key=key))
    assert parsed.status == ReplyStatus.OK and parsed.sources[0].url == "https://a.org/x"


def test_invalid_json_then_valid_on_retry(fakes: list[str]) -> None:
    good = _json("Aspirin thins the blood.", ["https://a.org/x"])
    asker, fake = _asker(fakes, ['{"answer": "Aspirin', good])
    reply = _ask(asker)
    assert reply.status == ReplyStatus.OK and len(fake.requests) == 2
    assert [a.problem for a in reply.attempts] == ["invalid JSON", None]


def test_invalid_twice_with_urls_in_the_text_is_the_fallback(fakes: list[str]) -> None:
    text = ("Aspirin thins the blood [1].\n\nSources:\n1. Aspirin - https://a.org/aspirin\n"
            "2. https://b.org/x")
    asker, fake = _asker(fakes, [text, text])
    reply = _ask(asker)
    assert reply.status == ReplyStatus.FALLBACK and reply.parsed_from == "text"
    assert reply.answer == "Aspirin thins the blood [1]."
    assert [(s.id, s.url) for s in reply.sources] == [
        ("1", "https://a.org/aspirin"), ("2", "https://b.org/x")]
    assert len(reply.attempts) == 2 and len(fake.requests) == 2


def test_no_url_anywhere_is_no_sources(fakes: list[str]) -> None:
    asker, fake = _asker(fakes, [_json("Aspirin thins the blood.", [])])
    reply = _ask(asker)
    assert reply.status == ReplyStatus.NO_SOURCES and reply.answer == "Aspirin thins the blood."
    assert len(fake.requests) == 1  # valid JSON with an answer: not retried


def test_prose_without_urls_is_retried_then_no_sources(fakes: list[str]) -> None:
    asker, _ = _asker(fakes, ["Aspirin thins the blood.", "Aspirin thins blood."])
    reply = _ask(asker)
    assert reply.status == ReplyStatus.NO_SOURCES and reply.parsed_from == "text"
    assert reply.answer == "Aspirin thins the blood." and len(reply.attempts) == 2


def test_a_refusal(fakes: list[str]) -> None:
    refusal = _json("I'm sorry, but I can't provide medical advice. "
                    "Please consult a healthcare professional.", [])
    asker, _ = _asker(fakes, [refusal])
    assert _ask(asker).status == ReplyStatus.REFUSAL


@pytest.mark.parametrize(("text", "refused"), [
    ("I can't provide medical advice.", True),
    ("Consult a healthcare professional.", True),
    ("As an AI, I cannot give medical advice. Please see your doctor.", True),
    ("I'm not a doctor. You should talk to your physician about this.", True),
    ("I can't provide medical advice, but aspirin does thin the blood.", False),
    ("Aspirin thins the blood. Consult a doctor before taking it.", False),
    ("I'm unable to find good data; aspirin likely helps.", False),
    ("", False),
])
def test_refusal_detection_is_conservative(text: str, refused: bool) -> None:
    assert is_refusal(text) is refused


def test_empty_twice_is_empty(fakes: list[str]) -> None:
    asker, fake = _asker(fakes, ["", "   \n"])
    reply = _ask(asker)
    assert reply.status == ReplyStatus.EMPTY and reply.answer == ""
    assert [a.problem for a in reply.attempts] == ["empty reply", "empty reply"]
    assert len(fake.requests) == 2


def test_no_retry_when_retries_is_zero(fakes: list[str]) -> None:
    asker, fake = _asker(fakes, [""], retries=0)
    assert _ask(asker).status == ReplyStatus.EMPTY and len(fake.requests) == 1


def test_a_provider_error_is_an_error_reply(fakes: list[str]) -> None:
    asker, _ = _asker(fakes, [ProviderError("bad request: model not found", status=404)])
    reply = _ask(asker)
    assert reply.status == ReplyStatus.ERROR and reply.answer == "" and not reply.sources
    [attempt] = reply.attempts
    assert attempt.error is not None and "model not found" in attempt.error


def test_the_best_attempt_is_kept_when_the_retry_fails(fakes: list[str]) -> None:
    asker, _ = _asker(fakes, ["Aspirin helps, see https://a.org/x", ProviderError("down")])
    reply = _ask(asker)
    assert reply.status == ReplyStatus.FALLBACK and reply.sources[0].url == "https://a.org/x"
    assert reply.attempts[1].error is not None


def test_the_same_url_ten_times_is_one_source(fakes: list[str]) -> None:
    asker, _ = _asker(fakes, [_json("Yes.", ["https://a.org/x"] * 10)])
    reply = _ask(asker)
    assert [s.url for s in reply.sources] == ["https://a.org/x"]
    assert reply.duplicate_urls == 9 and reply.dropped_urls == 0


def test_unusable_urls_are_dropped_and_counted(fakes: list[str]) -> None:
    entries = ["javascript:alert(1)", "ftp://files.org/a.pdf", "not a url", {"title": "x"}, 7,
               {"url": "https://a.org/ok"}]
    asker, _ = _asker(fakes, [_json("Yes.", entries)])
    reply = _ask(asker)
    assert reply.status == ReplyStatus.OK and [s.url for s in reply.sources] == ["https://a.org/ok"]
    assert reply.dropped_urls == 5


def test_only_unusable_urls_gives_no_sources() -> None:
    parsed = parse_reply(_json("Yes.", ["javascript:alert(1)", "mailto:a@b.org"]))
    assert parsed.status == ReplyStatus.NO_SOURCES and parsed.dropped_urls == 2


def test_fallback_duplicates_are_counted() -> None:
    parsed = parse_reply("Aspirin (https://a.org/x). More at https://a.org/x and https://b.org")
    assert parsed.status == ReplyStatus.FALLBACK and len(parsed.sources) == 2
    assert parsed.duplicate_urls == 1


def test_json_answer_with_urls_only_in_its_text() -> None:
    parsed = parse_reply(_json("Aspirin thins blood (https://a.org/x).", []))
    assert parsed.status == ReplyStatus.FALLBACK and parsed.problem is None
    assert parsed.answer == "Aspirin thins blood." and parsed.sources[0].url == "https://a.org/x"


def test_a_reply_cut_off_at_max_tokens(fakes: list[str]) -> None:
    cut = '{"answer": "Aspirin thins the blood.", "sources": [{"url": "https://a.org/x"}, {"u'

    def reply(request: ChatRequest) -> Completion:
        return Completion(text=cut, model=request.model, finish_reason="length",
                          usage=TokenCount(prompt_tokens=10, completion_tokens=300))

    asker, _ = _asker(fakes, [reply(ChatRequest(model="m", messages=()))] * 2)
    result = _ask(asker)
    assert result.status == ReplyStatus.FALLBACK
    assert result.answer == "Aspirin thins the blood." and result.sources[0].url == "https://a.org/x"
    assert result.attempts[0].problem == "invalid JSON (output cut off at max_tokens)"


def test_a_json_reply_without_an_answer_is_retried() -> None:
    parsed = parse_reply('{"sources": ["https://a.org/x"]}')
    assert parsed.status == ReplyStatus.EMPTY and parsed.problem == "JSON reply without an answer"
    assert parsed.sources[0].url == "https://a.org/x"


def test_the_retry_is_a_new_request_and_is_cached_too(fakes: list[str],
                                                      tmp_path: Path) -> None:
    cache = tmp_path / "cache.db"
    good = _json("Yes.", ["https://a.org/x"])
    asker, fake = _asker(fakes, ["not json", good], cache=cache, name="cached")
    assert _ask(asker).status == ReplyStatus.OK and len(fake.requests) == 2
    assert [r.seed for r in fake.requests] == [None, 1]  # not the cached first request
    # asked again (e.g. a --fresh rerun): both attempts come from the cache, nothing is paid
    again = _ask(Asker(get_model("fake:cached", SETTINGS, cache_path=cache), "m1",
                       settings=asker.settings))
    assert [a.cached for a in again.attempts] == [True, True] and len(fake.requests) == 2
    assert again.status == ReplyStatus.OK


def test_strip_url_list_keeps_the_prose() -> None:
    text = ("Aspirin [1](https://a.org) thins blood, see https://b.org/x.\n\n**References**\n"
            "- [Mayo](https://mayo.org)\n- https://x.org\n<https://y.org>")
    assert strip_url_list(text) == "Aspirin [1] thins blood, see."


def test_the_clock_counts_overlapping_calls_once(fakes: list[str]) -> None:
    good = _json("Yes.", ["https://a.org/x"])
    asker, _ = _asker(fakes, [good] * 4, delay_s=0.05)
    clock = asker.clock = CallClock()

    async def go() -> None:
        questions = [QUESTION.model_copy(update={"id": f"q{n}", "text": f"Q{n}?"})
                     for n in range(4)]
        await asyncio.gather(*(asker.ask(q) for q in questions))
        await asker.model.aclose()

    asyncio.run(go())
    assert 0.05 <= clock.busy_s < 0.15


def test_broken_json_with_unquoted_keys_keeps_only_the_answer() -> None:
    parsed = parse_reply('{answer: "Stage II is common. It hurts.", sources: ["https://a.org/x"]}')
    assert parsed.status == ReplyStatus.FALLBACK
    assert parsed.answer == "Stage II is common. It hurts."
    assert [s.url for s in parsed.sources] == ["https://a.org/x"]


def test_a_reply_cut_inside_an_emoji_is_kept_not_a_crash(fakes: list[str]) -> None:
    from medverify.files import record_json

    cut = ('{"answer": "Smile \\ud83d", '
           '"sources": [{"url": "https://a.org/x", "title": "A \\udc00"}]}')
    asker, _ = _asker(fakes, [cut])
    reply = _ask(asker)
    assert reply.status == ReplyStatus.OK and reply.answer == "Smile \ufffd"
    assert reply.sources[0].title == "A \ufffd"
    assert "\ufffd" in record_json(reply)


def test_a_reply_with_thousands_of_urls_keeps_the_first_fifty() -> None:
    from medverify.bench.ask import MAX_SOURCES, collect_sources

    sources, duplicates, dropped = collect_sources(
        [f"https://a.org/{n}" for n in range(2000)] + ["https://a.org/1"])
    assert len(sources) == MAX_SOURCES == 50 and dropped == 1950 and duplicates == 1
