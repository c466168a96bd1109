"""The model facade over the scripted fake provider: retries, timeouts, limits, accounting."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import pytest

from medverify.config import ModelSettings
from medverify.errors import ProviderError
from medverify.llm import (
    ChatRequest,
    Completion,
    Message,
    Model,
    RequestCache,
    TokenCount,
    UsageLedger,
    get_model,
)
from medverify.records import Usage
from medverify.testing import ScriptedProvider, register_fake, unregister_fake

FAST = ModelSettings(timeout_s=1.0, max_retries=3, backoff_s=0.001, backoff_max_s=0.01)
Q = [Message(role="user", content="question")]


def busy() -> ProviderError:
    return ProviderError("rate limited", status=429, retryable=True)


def run(model: Model, messages: list[Message] = Q, **kwargs: object) -> Completion:
    return asyncio.run(model.complete(messages, stage="s", **kwargs))  # type: ignore[arg-type]


def test_retryable_errors_then_success() -> None:
    fake = ScriptedProvider([busy(), busy(), "ok"])
    assert run(Model(fake, FAST)).text == "ok"
    assert len(fake.requests) == 3 and fake.remaining == 0


def test_non_retryable_error_raises_at_once() -> None:
    fake = ScriptedProvider([ProviderError("bad request", status=400), "never"])
    with pytest.raises(ProviderError, match=r"fake:scripted \(s\): bad request") as info:
        run(Model(fake, FAST))
    assert info.value.status == 400 and not info.value.retryable
    assert len(fake.requests) == 1


def test_retries_run_out() -> None:
    fake = ScriptedProvider([busy()] * 10)
    with pytest.raises(ProviderError, match="gave up after 2 attempts"):
        run(Model(fake, FAST.model_copy(update={"max_retries": 1})))
    assert len(fake.requests) == 2


def test_timeout_per_call_is_retryable() -> None:
    fake = ScriptedProvider(["a", "b", "c"], delay_s=0.5)
    settings = FAST.model_copy(update={"timeout_s": 0.05, "max_retries": 2})
    with pytest.raises(ProviderError, match=r"no reply within 0\.05 s"):
        run(Model(fake, settings))
    assert len(fake.requests) == 3


def test_backoff_is_exponential_with_jitter_and_capped() -> None:
    model = Model(ScriptedProvider([]), ModelSettings(backoff_s=1.0, backoff_max_s=5.0))
    for attempt, base in [(1, 1.0), (2, 2.0), (3, 4.0)]:
        delays = {model.backoff(attempt) for _ in range(50)}
        assert all(base / 2 <= d <= base for d in delays) and len(delays) > 1
    assert model.backoff(10) == 5.0
    assert model.backoff(1, retry_after=3.0) == 3.0
    assert model.backoff(1, retry_after=60.0) == 5.0


def test_concurrency_limit_shared_per_provider() -> None:
    fake = ScriptedProvider(lambda request: "ok", delay_s=0.02)
    settings = FAST.model_copy(update={"concurrency": 2})
    first, second = Model(fake, settings), Model(fake, settings)

    async def go() -> None:
        await asyncio.gather(*(m.complete(Q, stage="s", cache=False)
                               for m in (first, second) for _ in range(6)))

    asyncio.run(go())
    assert len(fake.requests) == 12 and fake.max_in_flight == 2


def test_semaphores_are_per_event_loop() -> None:
    fake = ScriptedProvider(lambda request: "ok")
    model = Model(fake, FAST)
    errors: list[BaseException] = []

    def in_thread() -> None:
        try:
            run(model)
        except BaseException as exc:
            errors.append(exc)

    run(model)
    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    run(model)
    assert errors == [] and len(fake.requests) == 3


def test_ledger_counts_stages_and_cache_hits(tmp_path: Path) -> None:
    completion = Completion(text="r", model="m", usage=TokenCount(prompt_tokens=7,
                                                                 completion_tokens=3))
    fake = ScriptedProvider(lambda request: completion)
    ledger = UsageLedger()
    cache = RequestCache(tmp_path / "c.db")
    model = Model(fake, FAST, cache=cache, ledger=ledger)

    async def go() -> None:
        await model.complete(Q, stage="judge")
        await model.complete(Q, stage="judge")
        await model.complete(Q, stage="decompose", cache=False)

    asyncio.run(go())
    cache.close()
    assert ledger.as_dict() == {
        "judge": Usage(calls=1, cached_calls=1, prompt_tokens=7, completion_tokens=3),
        "decompose": Usage(calls=1, prompt_tokens=7, completion_tokens=3),
    }
    assert ledger.total() == Usage(calls=2, cached_calls=1, prompt_tokens=14,
                                   completion_tokens=6)
    assert model.usage is ledger and len(fake.requests) == 2


def test_settings_cache_false_disables_cache(tmp_path: Path) -> None:
    fake = ScriptedProvider(lambda request: "ok")
    register_fake("nocache", fake)
    try:
        model = get_model("fake:nocache", FAST.model_copy(update={"cache": False}),
                          cache_path=tmp_path / "c.db")
    finally:
        unregister_fake("nocache")
    run(model)
    run(model)
    assert model.cache is None and len(fake.requests) == 2


def test_request_carries_options_and_model_name() -> None:
    fake = ScriptedProvider(["{}"])
    register_fake("opts", fake)
    try:
        model = get_model("fake:opts")
    finally:
        unregister_fake("opts")
    run(model, temperature=0.3, max_tokens=50, json_mode=True, seed=7)
    assert fake.requests[0] == ChatRequest(model="opts", messages=tuple(Q), temperature=0.3,
                                           max_tokens=50, json_mode=True, seed=7)


def test_scripted_provider_reply_kinds() -> None:
    async def reply(request: ChatRequest) -> str:
        return request.messages[-1].content.upper()

    assert run(Model(ScriptedProvider(reply), FAST)).text == "QUESTION"
    done = Completion(text="full", model="x", finish_reason="length")
    assert run(Model(ScriptedProvider([done]), FAST)).finish_reason == "length"
    with pytest.raises(ProviderError, match="ran out of scripted replies"):
        run(Model(ScriptedProvider([]), FAST))


def test_calls_are_logged_with_stage_and_tokens(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="medverify.llm"):
        run(Model(ScriptedProvider([busy(), "ok"]), FAST))
    assert "attempt 1/4 failed" in caplog.text
    assert "stage=s model=fake:scripted cached=False" in caplog.text
    assert "prompt_tokens=2 completion_tokens=1" in caplog.text


def test_properties() -> None:
    model = Model(ScriptedProvider([], name="p", model="tiny"), FAST)
    assert (model.id, model.name, model.spec) == ("fake:p", "tiny", "fake:p")
    assert repr(model) == "Model('fake:p')"


def test_identical_requests_in_flight_share_one_call(tmp_path: Path) -> None:
    fake = ScriptedProvider(lambda request: "shared", delay_s=0.05)
    ledger = UsageLedger()
    cache = RequestCache(tmp_path / "c.db")
    model = Model(fake, FAST, cache=cache, ledger=ledger)
    other = [Message(role="user", content="another question")]

    async def go() -> list[Completion]:
        same = [model.complete(Q, stage="judge") for _ in range(5)]
        return await asyncio.gather(*same, model.complete(other, stage="judge"))

    replies = asyncio.run(go())
    cache.close()
    assert [r.text for r in replies] == ["shared"] * 6
    assert len(fake.requests) == 2
    assert sum(not r.cached for r in replies) == 2
    real = [r for r in replies if not r.cached]
    assert ledger["judge"] == Usage(
        calls=2, cached_calls=4,
        prompt_tokens=sum(r.usage.prompt_tokens for r in real),
        completion_tokens=sum(r.usage.completion_tokens for r in real),
    )


def test_a_shared_failure_reaches_every_waiter(tmp_path: Path) -> None:
    fake = ScriptedProvider([ProviderError("bad request", status=400)], delay_s=0.02)
    cache = RequestCache(tmp_path / "c.db")
    model = Model(fake, FAST, cache=cache)

    async def go() -> list[object]:
        calls = [model.complete(Q, stage="judge") for _ in range(3)]
        return await asyncio.gather(*calls, return_exceptions=True)

    outcomes = asyncio.run(go())
    cache.close()
    assert len(fake.requests) == 1
    assert all(isinstance(o, ProviderError) and "bad request" in str(o) for o in outcomes)


def test_lone_surrogates_from_any_provider_are_scrubbed_before_the_cache(tmp_path: Path) -> None:
    """A scripted (non-HTTP) provider replying with a lone surrogate must not break the
    request cache or any later JSON write."""
    cache = RequestCache(tmp_path / "c.db")
    model = Model(ScriptedProvider(lambda _r: "ok \ud800 done"), FAST, cache=cache)
    first = asyncio.run(model.complete(Q, stage="t"))
    again = asyncio.run(model.complete(Q, stage="t"))
    cache.close()
    assert first.text == "ok \ufffd done" == again.text and again.cached
    first.model_dump_json()
