"""Observers of model calls (medverify.llm.observe): the facade tells each call's outcome,
time and tokens and each retry to the installed observers; a failing observer never fails
a call; nothing is told once the observer is removed."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from medverify.config import ModelSettings
from medverify.errors import ProviderError
from medverify.llm import Message, Model, RequestCache
from medverify.llm.observe import CallEvent, add_observer, observers, remove_observer
from medverify.testing import ScriptedProvider

FAST = ModelSettings(timeout_s=1.0, max_retries=2, backoff_s=0.001, backoff_max_s=0.01)
Q = [Message(role="user", content="question one")]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[CallEvent] = []
        self.retries: list[tuple[str, str]] = []

    def call(self, event: CallEvent) -> None:
        self.calls.append(event)

    def retry(self, model: str, stage: str) -> None:
        self.retries.append((model, stage))


@pytest.fixture
def recorder() -> Recorder:
    seen = Recorder()
    add_observer(seen)
    yield seen
    remove_observer(seen)
    assert seen not in observers()


def busy() -> ProviderError:
    return ProviderError("rate limited", status=429, retryable=True)


def test_each_call_and_retry_is_told(recorder: Recorder, tmp_path: Path) -> None:
    fake = ScriptedProvider([busy(), "the answer", ProviderError("bad", status=400)])
    cache = RequestCache(tmp_path / "cache.db")
    model = Model(fake, FAST, cache=cache)

    async def calls() -> None:
        await model.complete(Q, stage="judge")  # a retry, then ok
        await model.complete(Q, stage="judge")  # the cache answers
        with pytest.raises(ProviderError):
            await model.complete([Message(role="user", content="other")], stage="decompose")

    asyncio.run(calls())
    cache.close()
    assert recorder.retries == [("fake:scripted", "judge")]
    ok, cached, failed = recorder.calls
    assert (ok.model, ok.stage, ok.outcome, ok.error) == ("fake:scripted", "judge", "ok", None)
    assert ok.prompt_tokens == 3 and ok.completion_tokens == 3 and ok.seconds > 0
    assert (cached.outcome, cached.prompt_tokens, cached.completion_tokens) == ("cached", 0, 0)
    assert (failed.stage, failed.outcome, failed.error) == ("decompose", "error",
                                                            "ProviderError")
    assert model.usage["judge"].calls == 1  # accounting unchanged


def test_a_failing_observer_never_fails_the_call(recorder: Recorder,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def call(self, event: CallEvent) -> None:
            raise RuntimeError("observer bug")

        def retry(self, model: str, stage: str) -> None:
            raise RuntimeError("observer bug")

    broken = Broken()
    add_observer(broken)
    add_observer(broken)  # once only
    try:
        assert observers().count(broken) == 1
        with caplog.at_level(logging.ERROR, logger="medverify.llm.observe"):
            reply = asyncio.run(Model(ScriptedProvider([busy(), "fine"]), FAST)
                                .complete(Q, stage="judge"))
    finally:
        remove_observer(broken)
    assert reply.text == "fine" and len(recorder.calls) == 1  # the others still told
    assert [r.exc_info[1].args for r in caplog.records if r.exc_info] == [("observer bug",)] * 2


def test_nothing_is_told_without_observers() -> None:
    seen = Recorder()
    add_observer(seen)
    remove_observer(seen)
    asyncio.run(Model(ScriptedProvider(["x"]), FAST).complete(Q, stage="judge"))
    assert seen.calls == [] and seen.retries == []
