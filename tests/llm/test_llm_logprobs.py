"""Log-probabilities through the model facade: request options, parsing, caching."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest

from medverify.config import ModelSettings
from medverify.llm import ChatRequest, Completion, Message, Model, RequestCache, get_model
from medverify.llm.base import TokenLogprobs, TopLogprob
from medverify.testing import FakeChatServer, FakeResponse, ScriptedProvider
from medverify.testing.fake_provider import logprob_reply

FAST = ModelSettings(timeout_s=2.0, max_retries=1, backoff_s=0.001, backoff_max_s=0.01)
HELLO = [Message(role="user", content="is it true?")]


def chat_body(text: str, logprobs: Any) -> str:
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": text}}
    if logprobs is not None:
        choice["logprobs"] = logprobs
    return json.dumps({"model": "m", "choices": [choice],
                       "usage": {"prompt_tokens": 5, "completion_tokens": 1}})


YES_LOGPROBS = {"content": [{
    "token": "Yes", "logprob": math.log(0.6), "bytes": [89, 101, 115],
    "top_logprobs": [
        {"token": "Yes", "logprob": math.log(0.6), "bytes": [89, 101, 115]},
        {"token": "No", "logprob": math.log(0.3), "bytes": [78, 111]},
        {"token": " yes", "logprob": -12.5, "bytes": None},
    ]}]}


def model_for(server: FakeChatServer, cache_path: Path | None = None) -> Model:
    return get_model(f"openai-compatible:m@{server.base_url}", FAST, cache_path=cache_path)


async def complete(model: Model, top_logprobs: int | None = 3) -> Completion:
    try:
        return await model.complete(HELLO, stage="test", max_tokens=1, top_logprobs=top_logprobs)
    finally:
        await model.aclose()


def test_request_carries_logprobs_and_reply_is_parsed() -> None:
    with FakeChatServer(FakeResponse(raw_body=chat_body("Yes", YES_LOGPROBS))) as server:
        completion = asyncio.run(complete(model_for(server), top_logprobs=3))
    body = server.requests[0]
    assert body["logprobs"] is True and body["top_logprobs"] == 3 and body["max_tokens"] == 1
    assert completion.text == "Yes"
    assert completion.logprobs is not None and len(completion.logprobs) == 1
    step = completion.logprobs[0]
    assert step.token == "Yes" and step.logprob == pytest.approx(math.log(0.6))
    assert [t.token for t in step.top] == ["Yes", "No", " yes"]
    assert step.top[1].logprob == pytest.approx(math.log(0.3))
    assert step.top[2].logprob == -12.5


def test_no_logprobs_requested_sends_none_and_parses_none() -> None:
    with FakeChatServer(FakeResponse(raw_body=chat_body("Yes", YES_LOGPROBS))) as server:
        completion = asyncio.run(complete(model_for(server), top_logprobs=None))
    assert "logprobs" not in server.requests[0] and "top_logprobs" not in server.requests[0]
    assert completion.logprobs is None


@pytest.mark.parametrize("logprobs", [None, {"content": None}, {"refusal": None}])
def test_server_without_logprobs_gives_none(logprobs: Any) -> None:
    with FakeChatServer(FakeResponse(raw_body=chat_body("no", logprobs))) as server:
        completion = asyncio.run(complete(model_for(server)))
    assert completion.text == "no" and completion.logprobs is None


def test_unreadable_logprobs_are_logged_and_dropped(caplog: pytest.LogCaptureFixture) -> None:
    broken = {"content": [{"token": "no", "logprob": "high"}]}
    with FakeChatServer(FakeResponse(raw_body=chat_body("no", broken))) as server, \
            caplog.at_level(logging.WARNING, "medverify.llm.openai_compat"):
        completion = asyncio.run(complete(model_for(server)))
    assert completion.text == "no" and completion.logprobs is None
    assert "unreadable logprobs" in caplog.text


def test_infinite_logprob_is_floored() -> None:
    raw = chat_body("no", {"content": [{"token": "no", "logprob": 0.0, "top_logprobs": [
        {"token": "no", "logprob": 0.0}, {"token": "yes", "logprob": float("-inf")}]}]})
    assert "-Infinity" in raw
    with FakeChatServer(FakeResponse(raw_body=raw)) as server:
        completion = asyncio.run(complete(model_for(server)))
    assert completion.logprobs is not None
    assert completion.logprobs[0].top[1].logprob == -9999.0


def test_cache_round_trip_keeps_logprobs(tmp_path: Path) -> None:
    cache_path = tmp_path / "cache.sqlite"
    with FakeChatServer(FakeResponse(raw_body=chat_body("Yes", YES_LOGPROBS))) as server:
        first = asyncio.run(complete(model_for(server, cache_path)))
        second = asyncio.run(complete(model_for(server, cache_path)))
        other_k = asyncio.run(complete(model_for(server, cache_path), top_logprobs=5))
    assert len(server.requests) == 2  # the second call was a cache hit; k=5 is another key
    assert not first.cached and second.cached and not other_k.cached
    assert second.logprobs == first.logprobs and second.logprobs is not None


def test_old_cache_rows_without_logprobs_still_load(tmp_path: Path) -> None:
    cache = RequestCache(tmp_path / "old.sqlite")
    old_row = json.dumps({"text": "hi", "model": "m", "usage": {"prompt_tokens": 1,
                          "completion_tokens": 1, "estimated": False},
                          "finish_reason": "stop", "cached": False, "latency_s": 0.1})
    assert cache._conn is not None
    with cache._conn:
        cache._conn.execute("INSERT INTO completions (key, provider, completion, created_at) "
                            "VALUES (?, ?, ?, ?)",
                            ("k", "p", old_row, "2024-01-01T00:00:00+00:00"))
    loaded = cache.get("k")
    cache.close()
    assert loaded is not None and loaded.text == "hi" and loaded.logprobs is None


def test_cache_key_unchanged_without_top_logprobs() -> None:
    request = ChatRequest(model="m", messages=tuple(HELLO), max_tokens=1)
    legacy = {"provider": "p", "model": "m", "messages": [{"role": "user", "content":
              "is it true?"}], "temperature": 0.0, "max_tokens": 1, "json_mode": False,
              "seed": None, "extra": {}}
    expected = hashlib.sha256(json.dumps(legacy, sort_keys=True,
                                         ensure_ascii=False).encode()).hexdigest()
    assert request.cache_key("p") == expected
    with_k = request.model_copy(update={"top_logprobs": 20})
    assert with_k.cache_key("p") != expected
    assert with_k.cache_key("p") != request.model_copy(update={"top_logprobs": 5}).cache_key("p")


def test_negative_top_logprobs_rejected() -> None:
    with pytest.raises(ValueError, match="top_logprobs"):
        ChatRequest(model="m", messages=tuple(HELLO), top_logprobs=-1)


def test_scripted_provider_passes_logprobs_and_sees_request() -> None:
    fake = ScriptedProvider([logprob_reply([{"no": 0.7, "yes": 0.2}, {".": 0.9}])])

    async def run() -> Completion:
        return await Model(fake).complete(HELLO, stage="t", top_logprobs=2)

    completion = asyncio.run(run())
    assert fake.requests[0].top_logprobs == 2
    assert completion.text == "no."
    assert completion.logprobs == [
        TokenLogprobs(token="no", logprob=math.log(0.7), top=[
            TopLogprob(token="no", logprob=math.log(0.7)),
            TopLogprob(token="yes", logprob=math.log(0.2))]),
        TokenLogprobs(token=".", logprob=math.log(0.9),
                      top=[TopLogprob(token=".", logprob=math.log(0.9))]),
    ]


def test_logprob_reply_rejects_bad_probabilities() -> None:
    with pytest.raises(ValueError, match="probabilities"):
        logprob_reply([{"yes": 1.5}])
    with pytest.raises(ValueError, match="probabilities"):
        logprob_reply([{}])
