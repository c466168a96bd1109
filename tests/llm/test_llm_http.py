"""The model facade + OpenAI-compatible provider against a real local fake server."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from pathlib import Path

import pytest

from medverify.config import ModelSettings
from medverify.errors import ConfigError, ProviderError
from medverify.llm import Completion, Message, Model, UsageLedger, get_model
from medverify.testing import FakeChatServer, FakeResponse

FAST = ModelSettings(timeout_s=2.0, max_retries=3, backoff_s=0.001, backoff_max_s=0.05)
HELLO = [Message(role="user", content="hello there")]


def model_for(server: FakeChatServer, settings: ModelSettings = FAST, *, options: str = "",
              cache_path: Path | None = None, ledger: UsageLedger | None = None) -> Model:
    spec = f"openai-compatible:test-model@{server.base_url}{options}"
    return get_model(spec, settings, cache_path=cache_path, ledger=ledger)


async def ask(model: Model, messages: list[Message] = HELLO, *, stage: str = "test",
              json_mode: bool = False) -> str:
    return (await _complete_once(model, messages, stage=stage, json_mode=json_mode)).text


async def _complete_once(model: Model, messages: list[Message] = HELLO, *, stage: str = "test",
                         json_mode: bool = False) -> Completion:
    try:
        return await model.complete(messages, stage=stage, json_mode=json_mode)
    finally:
        await model.aclose()


def test_success_sends_openai_request_and_reads_usage() -> None:
    with FakeChatServer("fine, thanks") as server:
        model = model_for(server)
        completion = asyncio.run(_complete_once(model))
    assert completion.text == "fine, thanks"
    assert completion.finish_reason == "stop" and not completion.cached
    assert completion.usage.prompt_tokens == len("hello there") // 4
    assert not completion.usage.estimated
    assert completion.latency_s is not None and completion.latency_s > 0
    body = server.requests[0]
    assert body["model"] == "test-model"
    assert body["messages"] == [{"role": "user", "content": "hello there"}]
    assert body["temperature"] == 0.0 and "response_format" not in body


def test_429_storm_then_success_honours_retry_after() -> None:
    storm = [FakeResponse.error(429, retry_after=0.04)] * 3
    with FakeChatServer("ok", script=storm) as server:
        started = time.perf_counter()
        assert asyncio.run(ask(model_for(server))) == "ok"
        elapsed = time.perf_counter() - started
    assert len(server.requests) == 4
    assert elapsed >= 3 * 0.04  # waited at least Retry-After each time (cap is 0.05)


def test_retry_after_is_capped_by_backoff_max() -> None:
    storm = [FakeResponse.error(429, retry_after=30)] * 2
    with FakeChatServer("ok", script=storm) as server:
        started = time.perf_counter()
        assert asyncio.run(ask(model_for(server))) == "ok"
    assert time.perf_counter() - started < 10.0  # uncapped, it would wait 2 x 30 s


def test_500_until_retries_run_out() -> None:
    settings = FAST.model_copy(update={"max_retries": 2})
    with (
        FakeChatServer(FakeResponse.error(500)) as server,
        pytest.raises(ProviderError, match="gave up after 3 attempts") as info,
    ):
        asyncio.run(ask(model_for(server, settings)))
    assert info.value.status == 500 and info.value.retryable
    assert len(server.requests) == 3


def test_timeout_is_retried() -> None:
    settings = FAST.model_copy(update={"timeout_s": 0.3})
    slow = [FakeResponse(text="too late", delay_s=1.0)]
    with FakeChatServer("in time", script=slow) as server:
        assert asyncio.run(ask(model_for(server, settings))) == "in time"
    assert len(server.requests) == 2


def test_slow_server_times_out_when_retries_run_out() -> None:
    settings = FAST.model_copy(update={"timeout_s": 0.2, "max_retries": 1})
    with (
        FakeChatServer("late", delay_s=0.6) as server,
        pytest.raises(ProviderError, match=r"no reply within 0\.2 s"),
    ):
        asyncio.run(ask(model_for(server, settings)))
    assert len(server.requests) == 2


def test_connection_refused_is_retryable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = FAST.model_copy(update={"max_retries": 1})
    model = get_model(f"vllm:m@http://127.0.0.1:{port}/v1", settings)
    with pytest.raises(ProviderError, match="cannot reach") as info:
        asyncio.run(ask(model))
    assert info.value.retryable


@pytest.mark.parametrize("body", ["<html>Bad Gateway</html>", '{"object": "list"}',
                                  '{"choices": []}'])
def test_malformed_body_is_not_retried(body: str) -> None:
    with (
        FakeChatServer(FakeResponse.malformed(body)) as server,
        pytest.raises(ProviderError, match="malformed reply") as info,
    ):
        asyncio.run(ask(model_for(server)))
    assert not info.value.retryable
    assert body[:10] in str(info.value)
    assert len(server.requests) == 1


def test_truncated_json_content_is_returned_with_finish_reason() -> None:
    with FakeChatServer(FakeResponse.truncated('{"label": "SUPP')) as server:
        completion = asyncio.run(_complete_once(model_for(server), json_mode=True))
    assert completion.text == '{"label": "SUPP'
    assert completion.finish_reason == "length"


def test_missing_usage_is_estimated_and_flagged() -> None:
    with FakeChatServer(FakeResponse(text="x" * 40, usage=False)) as server:
        completion = asyncio.run(_complete_once(model_for(server)))
    assert completion.usage.estimated
    assert completion.usage.completion_tokens == 10
    assert completion.usage.prompt_tokens == 3  # ceil(11 / 4)


def test_401_fails_at_once_naming_the_key_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MV_TEST_KEY", "sk-wrong-key")
    with (
        FakeChatServer("ok", api_key="sk-right-key") as server,
        pytest.raises(ProviderError, match=r"check the API key in \$MV_TEST_KEY") as info,
    ):
        asyncio.run(ask(model_for(server, options="?key_env=MV_TEST_KEY")))
    assert info.value.status == 401 and not info.value.retryable
    assert "sk-wrong-key" not in str(info.value)
    assert len(server.requests) == 1


def test_404_names_the_model() -> None:
    with (
        FakeChatServer(FakeResponse.error(404)) as server,
        pytest.raises(ProviderError, match="check the model name 'test-model'"),
    ):
        asyncio.run(ask(model_for(server)))
    assert len(server.requests) == 1


def test_missing_key_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MV_ABSENT_KEY", raising=False)
    with (
        FakeChatServer("ok") as server,
        pytest.raises(ConfigError, match="MV_ABSENT_KEY"),
    ):
        asyncio.run(ask(model_for(server, options="?key_env=MV_ABSENT_KEY")))
        assert server.requests == []


def test_json_mode_asks_for_json_object() -> None:
    with FakeChatServer('{"a": 1}') as server:
        assert asyncio.run(ask(model_for(server), json_mode=True)) == '{"a": 1}'
    assert server.requests[0]["response_format"] == {"type": "json_object"}


def test_json_mode_falls_back_when_server_rejects_response_format() -> None:
    with FakeChatServer('{"a": 1}', reject_response_format=True) as server:
        model = model_for(server)

        async def twice() -> list[str]:
            async with model:
                first = await model.complete(HELLO, stage="t", json_mode=True)
                second = await model.complete(HELLO + HELLO, stage="t", json_mode=True)
                return [first.text, second.text]

        assert asyncio.run(twice()) == ['{"a": 1}', '{"a": 1}']
    flags = ["response_format" in body for body in server.requests]
    assert flags == [True, False, False]  # fell back once, then remembered


def test_cache_hit_makes_no_second_call_and_persists(tmp_path: Path) -> None:
    cache_path = tmp_path / "cache.db"
    ledger = UsageLedger()
    with FakeChatServer("cached answer") as server:

        async def run() -> list[bool]:
            flags = []
            for _ in range(2):  # two Model instances on the same cache file
                async with model_for(server, cache_path=cache_path, ledger=ledger) as model:
                    for _ in range(2):
                        flags.append((await model.complete(HELLO, stage="judge")).cached)
            return flags

        assert asyncio.run(run()) == [False, True, True, True]
    assert len(server.requests) == 1
    assert ledger["judge"].calls == 1 and ledger["judge"].cached_calls == 3


def test_cache_can_be_bypassed_and_keys_on_the_request(tmp_path: Path) -> None:
    with FakeChatServer("x") as server:
        model = model_for(server, cache_path=tmp_path / "c.db")

        async def run() -> None:
            async with model:
                await model.complete(HELLO, stage="s")
                await model.complete(HELLO, stage="s", cache=False)
                await model.complete(HELLO, stage="s", temperature=0.7)
                await model.complete(HELLO, stage="s", temperature=0.7)

        asyncio.run(run())
    assert len(server.requests) == 3


def test_failures_are_not_cached(tmp_path: Path) -> None:
    with FakeChatServer("ok", script=[FakeResponse.error(400)]) as server:
        model = model_for(server, cache_path=tmp_path / "c.db")
        with pytest.raises(ProviderError):
            asyncio.run(ask(model))
        assert asyncio.run(ask(model)) == "ok"
    assert len(server.requests) == 2


def test_corrupt_cache_file_is_tolerated(tmp_path: Path,
                                         caplog: pytest.LogCaptureFixture) -> None:
    cache_path = tmp_path / "cache.db"
    cache_path.write_bytes(b"this is not a sqlite database" * 100)
    with FakeChatServer("still works") as server, caplog.at_level(logging.WARNING):
        model = model_for(server, cache_path=cache_path)
        assert asyncio.run(ask(model)) == "still works"
        assert asyncio.run(ask(model)) == "still works"
    assert "continuing without a cache" in caplog.text
    assert len(server.requests) == 2


def test_concurrency_limit_is_shared_by_models_of_one_provider() -> None:
    settings = FAST.model_copy(update={"concurrency": 3})
    with FakeChatServer("ok", delay_s=0.05) as server:
        models = [model_for(server, settings) for _ in range(2)]

        async def run() -> None:
            calls = [m.complete([Message(role="user", content=f"q{i}")], stage="s")
                     for i in range(8) for m in models]
            await asyncio.gather(*calls)
            for m in models:
                await m.aclose()

        asyncio.run(run())
    assert len(server.requests) == 16
    assert 2 <= server.max_in_flight <= 3  # the shared limit (a loaded machine overlaps less)


def test_usage_ledger_per_stage_is_shared() -> None:
    ledger = UsageLedger()
    with FakeChatServer("a reply of some length") as server:
        decomposer = model_for(server, ledger=ledger)
        judge = model_for(server, ledger=ledger)
        asyncio.run(ask(decomposer, stage="decompose"))
        asyncio.run(ask(judge, stage="judge"))
        asyncio.run(ask(judge, stage="judge"))
    assert set(ledger) == {"decompose", "judge"}
    assert ledger["judge"].calls == 2 and ledger["decompose"].calls == 1
    assert ledger["judge"].completion_tokens == 2 * (len("a reply of some length") // 4)
    assert ledger.total().calls == 3
    assert decomposer.usage is judge.usage is ledger


def test_api_key_never_in_logs_or_reprs(monkeypatch: pytest.MonkeyPatch,
                                        caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-very-secret-0123456789"
    monkeypatch.setenv("MV_SECRET_KEY", secret)
    with FakeChatServer("ok", api_key=secret) as server, caplog.at_level(logging.DEBUG):
        model = model_for(server, options="?key_env=MV_SECRET_KEY")
        texts = [repr(model), model.spec, repr(model.provider), str(vars(model.provider))]
        assert asyncio.run(ask(model)) == "ok"
    assert server.calls[0].headers["authorization"] == f"Bearer {secret}"
    assert "stage=test" in caplog.text  # the call itself was logged
    for text in [*texts, caplog.text]:
        assert secret not in text


def test_model_survives_several_event_loops() -> None:
    with FakeChatServer("ok") as server:
        model = model_for(server)
        assert asyncio.run(_complete_once(model)).text == "ok"
        assert asyncio.run(_complete_once(model)).text == "ok"
