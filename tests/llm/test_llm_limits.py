"""Limits on model calls: the byte cap on replies (ERROR with the cause, memory flat, nothing
cached), the cap on what a verdict keeps of a reply, and the time budgets per call and per
answer (a stalled endpoint ends at the budget, not after every attempt's timeout)."""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc
from pathlib import Path

import pytest

from medverify.config import ModelSettings
from medverify.errors import ProviderError
from medverify.judge import JudgeItem
from medverify.judge.llm import LLMJudge
from medverify.llm import Completion, Message, Model, get_model, parse_spec
from medverify.llm.cache import RequestCache
from medverify.llm.limits import BudgetSpent, ReplyTooLarge, answer_budget, clip_stored
from medverify.records import Claim, Passage
from medverify.testing import (
    FakeChatServer,
    FakeResponse,
    ScriptedProvider,
    register_fake,
    unregister_fake,
)
from medverify.testing.judge import judge_reply, keyword_rule

HELLO = [Message(role="user", content="hello there")]
MB = 1_000_000
SLACK_S = 0.75  # scheduling and connection set-up beyond a budget, on a busy CI machine


def _model(server: FakeChatServer, settings: ModelSettings, cache: Path | None = None) -> Model:
    return get_model(f"openai-compatible:m@{server.base_url}", settings, cache_path=cache)


async def _ask(model: Model, messages: list[Message] = HELLO) -> Completion:
    try:
        return await model.complete(messages, stage="test")
    finally:
        await model.aclose()


def _failure(model: Model) -> tuple[ProviderError, float]:
    """The error of one call and the seconds it took."""
    started = time.perf_counter()
    with pytest.raises(ProviderError) as caught:
        asyncio.run(_ask(model))
    return caught.value, time.perf_counter() - started


# -- the byte cap on replies -------------------------------------------------------------


@pytest.mark.parametrize("declare_length", [True, False], ids=["content-length", "chunked"])
def test_a_50_mb_reply_is_refused_without_being_read(tmp_path: Path,
                                                     declare_length: bool) -> None:
    """The reply is streamed by a local server in 64 KiB pieces (it never exists whole);
    the client stops at the 1 MB cap, so Python's peak allocation stays near the cap
    (before the cap: 152 MB for this reply), the error names the setting, the call is not
    retried and nothing is cached."""
    settings = ModelSettings(max_retries=3, backoff_s=0.001, max_reply_bytes=MB)
    with FakeChatServer(FakeResponse.huge(50 * MB, declare_length=declare_length)) as server:
        model = _model(server, settings, tmp_path / "cache.db")
        tracemalloc.start()
        try:
            error, _ = _failure(model)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        cache = RequestCache(tmp_path / "cache.db")
        stored = cache.count()
        cache.close()
    assert isinstance(error, ReplyTooLarge) and not error.retryable
    assert "larger than 1,000,000 bytes ([llm] max_reply_bytes)" in str(error)
    assert len(server.requests) == 1  # refused, not asked again
    assert stored == 0
    assert peak < 6 * MB, f"peak Python allocation {peak / MB:.1f} MB for a refused reply"
    assert server.streamed_bytes < 25 * MB  # the client hung up: the rest was never sent


@pytest.mark.parametrize("declare_length", [True, False], ids=["content-length", "chunked"])
def test_a_reply_under_the_cap_is_read_whole(declare_length: bool) -> None:
    settings = ModelSettings(max_retries=0, max_reply_bytes=MB)
    with FakeChatServer(FakeResponse.huge(900_000, declare_length=declare_length)) as server:
        completion = asyncio.run(_ask(_model(server, settings)))
    assert completion.text == "a" * 900_000


def test_error_replies_are_read_only_for_a_snippet() -> None:
    body = json.dumps({"error": {"message": "x" * (5 * MB)}})
    with FakeChatServer(FakeResponse(status=400, raw_body=body)) as server:
        error, _ = _failure(_model(server, ModelSettings(max_retries=0)))
    assert error.status == 400 and "answered HTTP 400" in str(error) and len(str(error)) < 600


def test_the_cap_holds_for_every_provider_counted_in_utf8_bytes(tmp_path: Path) -> None:
    """A provider that is not HTTP (here a scripted one; the local model too) is held to the
    same cap, in UTF-8 bytes: 600,000 'é' are 1.2 MB."""
    cache = RequestCache(tmp_path / "cache.db")
    big = ScriptedProvider(["é" * 600_000, "é" * 400_000])
    model = Model(big, ModelSettings(max_reply_bytes=MB, max_retries=2), cache=cache)
    with pytest.raises(ReplyTooLarge, match=r"1,200,000 \(\[llm\] max_reply_bytes|max_reply"):
        asyncio.run(model.complete(HELLO, stage="test"))
    assert len(big.requests) == 1 and cache.count() == 0
    ok = asyncio.run(model.complete([Message(role="user", content="again")], stage="test"))
    assert len(ok.text) == 400_000 and cache.count() == 1
    cache.close()


def test_an_oversized_cached_entry_is_a_miss(tmp_path: Path) -> None:
    """A cache written before the cap may hold a huge reply: it is not loaded, the model is
    asked again."""
    cache = RequestCache(tmp_path / "cache.db")
    provider = ScriptedProvider(["small"])
    model = Model(provider, ModelSettings(max_reply_bytes=100_000), cache=cache)
    request_key = _cache_key(model, HELLO)
    cache.put(request_key, model.id, Completion(text="b" * 500_000, model="fake-model"))
    completion = asyncio.run(model.complete(HELLO, stage="test"))
    assert completion.text == "small" and not completion.cached
    assert len(provider.requests) == 1
    cache.close()


def _cache_key(model: Model, messages: list[Message]) -> str:
    from medverify.llm.base import ChatRequest

    return ChatRequest(model=model.name, messages=tuple(messages)).cache_key(model.id)


# -- what a verdict keeps of a reply -----------------------------------------------------


def test_clip_stored_marks_the_cut() -> None:
    assert clip_stored("short", 10) == "short" and clip_stored(None, 10) is None
    clipped = clip_stored("x" * 1500, 1000)
    assert clipped is not None and clipped.startswith("x" * 1000)
    assert "[truncated by medverify: 500 more characters not kept" in clipped
    assert "[llm] max_stored_chars = 1,000" in clipped


def test_a_verdict_keeps_at_most_max_stored_chars_of_reasoning() -> None:
    """A judge reply within the reply cap but with 200 KB of reasoning: the verdict stands,
    and its raw output, reason and quote are cut and marked."""
    def reply(request: object) -> str:
        prompt = request.messages[-1].content  # type: ignore[attr-defined]
        data = json.loads(judge_reply(prompt, keyword_rule(supported="metformin")))
        data["results"][0]["factual"]["reasoning"] = "because " * 25_000
        data["results"][0]["counterfactual"]["quote"] = "q" * 50_000
        return json.dumps(data)

    model = Model(ScriptedProvider(reply), ModelSettings(max_stored_chars=1000))
    passage = Passage(id="p1", doc_id="d", text="Metformin is first-line for type 2 diabetes.")
    item = JudgeItem(claim=Claim(id="c1", text="Metformin is first-line for type 2 diabetes."),
                     passages=[passage])
    [verdict] = asyncio.run(LLMJudge(model).judge([item]))
    assert verdict.ok and verdict.factual is not None and verdict.factual.holds
    for text in (verdict.raw_output, verdict.factual.reason, verdict.counterfactual.quote):
        assert text is not None and len(text) < 1200 and "[truncated by medverify" in text
    assert len(verdict.model_dump_json()) < 6000


# -- time budgets --------------------------------------------------------------------------


def test_a_stalled_endpoint_ends_at_the_call_budget() -> None:
    """Accepted, never answered: 5 attempts x 60 s before; now the call's budget (1 s
    here) ends it, whatever the per-attempt timeout."""
    settings = ModelSettings(timeout_s=60, max_retries=4, call_budget_s=1.0)
    with FakeChatServer(FakeResponse.stall()) as server:
        error, took = _failure(_model(server, settings))
    assert isinstance(error, BudgetSpent) and not error.retryable
    assert "call's time budget of 1 s ([llm] call_budget_s) ran out" in str(error)
    assert 1.0 <= took < 1.0 + SLACK_S, f"{took:.2f} s"
    assert len(server.requests) == 1


def test_retries_stop_when_the_budget_cannot_cover_the_next_attempt() -> None:
    """A 503 asking to come back in 5 s, with 2 s of budget: no pointless wait."""
    settings = ModelSettings(max_retries=4, call_budget_s=2.0, backoff_max_s=30)
    with FakeChatServer(FakeResponse.error(503, retry_after=5)) as server:
        error, took = _failure(_model(server, settings))
    assert isinstance(error, BudgetSpent) and error.status == 503
    assert "no time for another attempt after 1" in str(error)
    assert "HTTP 503" in str(error)
    assert took < 1.0 and len(server.requests) == 1


def test_retries_inside_the_budget_still_succeed() -> None:
    storm = [FakeResponse.error(503, retry_after=0.05)] * 2
    settings = ModelSettings(max_retries=4, call_budget_s=5.0, backoff_s=0.05)
    with FakeChatServer("fine", script=storm) as server:
        assert asyncio.run(_ask(_model(server, settings))).text == "fine"
    assert len(server.requests) == 3


def test_an_answer_budget_bounds_calls_made_one_after_another() -> None:
    provider = ScriptedProvider(lambda _r: "ok", delay_s=0.4)
    model = Model(provider, ModelSettings(call_budget_s=5.0))

    async def many() -> int:
        done = 0
        with answer_budget(1.0):
            for i in range(10):
                await model.complete([Message(role="user", content=f"q{i}")], stage="judge")
                done += 1
        return done

    started = time.perf_counter()
    with pytest.raises(BudgetSpent, match=r"answer's time budget of 1 s \(\[llm\] answer_b"):
        asyncio.run(many())
    took = time.perf_counter() - started
    assert 1.0 <= took < 1.0 + SLACK_S and len(provider.requests) == 3


def test_an_answer_budget_bounds_waiting_for_a_slot_in_tasks_started_inside() -> None:
    """One slot, held by a call that never ends: a call in a task started inside an answer's
    budget stops waiting for the slot when the answer's time is up."""
    model = Model(ScriptedProvider(lambda _r: "ok", delay_s=30),
                  ModelSettings(concurrency=1, call_budget_s=20))

    async def wait_for_slot() -> tuple[BaseException | None, float]:
        holder = asyncio.ensure_future(model.complete(HELLO, stage="other"))
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        with answer_budget(0.5):
            task = asyncio.ensure_future(
                model.complete([Message(role="user", content="q")], stage="judge"))
        try:
            await task
            error = None
        except BudgetSpent as exc:
            error = exc
        took = time.perf_counter() - started
        holder.cancel()
        return error, took

    error, took = asyncio.run(wait_for_slot())
    assert error is not None and "still waiting for a free slot" in str(error)
    assert 0.5 <= took < 0.5 + SLACK_S


def test_budget_defaults_end_a_stall_well_under_a_minute() -> None:
    defaults = ModelSettings()
    assert defaults.call_budget_s == 30 and defaults.answer_budget_s == 45
    assert defaults.max_reply_bytes == MB


def test_an_explicit_timeout_gets_one_whole_attempt() -> None:
    """``timeout_s = 120`` in a config, or ``?timeout=120`` in a spec, is not cut to the
    default 30 s budget; a budget set as well wins."""
    assert ModelSettings(timeout_s=120).call_budget_s == 120
    assert ModelSettings(timeout_s=120, call_budget_s=40).call_budget_s == 40
    spec = parse_spec("vllm:m@http://gpu:8000/v1?timeout=90&budget=180")
    assert spec.call_budget_s == 180 and str(spec).endswith("?timeout=90&budget=180")
    register_fake("limits", ScriptedProvider(["ok"]))
    try:
        assert get_model("fake:limits?timeout=120").settings.call_budget_s == 120
        assert get_model("fake:limits?timeout=120&budget=10").settings.call_budget_s == 10
        assert get_model("fake:limits?budget=0").settings.call_budget_s == 0
    finally:
        unregister_fake("limits")


def test_a_slow_in_process_provider_gets_its_own_timeout_and_no_answer_budget() -> None:
    slow = ScriptedProvider(["ok"])
    slow.default_timeout_s = 900.0  # type: ignore[attr-defined]  # like local:NAME
    register_fake("slow", slow)
    try:
        settings = get_model("fake:slow").settings
        explicit = get_model("fake:slow", ModelSettings(answer_budget_s=600)).settings
    finally:
        unregister_fake("slow")
    assert settings.timeout_s == 900 and settings.call_budget_s == 900
    assert settings.answer_budget_s == 0
    assert explicit.answer_budget_s == 600


def test_a_caller_sharing_anothers_call_waits_only_within_its_answer_budget(
        tmp_path: Path) -> None:
    """Identical cacheable requests share one call; a second caller inside an answer's
    budget stops waiting for the first caller's (slow) call when its own time is up."""
    cache = RequestCache(tmp_path / "cache.db")
    model = Model(ScriptedProvider(lambda _r: "late", delay_s=2.0), ModelSettings(),
                  cache=cache)

    async def share() -> tuple[BaseException | None, float, str]:
        first = asyncio.ensure_future(model.complete(HELLO, stage="first"))
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        error = None
        with answer_budget(0.3):
            try:
                await model.complete(HELLO, stage="second")
            except BudgetSpent as exc:
                error = exc
        took = time.perf_counter() - started
        return error, took, (await first).text

    error, took, first_text = asyncio.run(share())
    cache.close()
    assert error is not None and "same request made by another caller" in str(error)
    assert 0.3 <= took < 0.3 + SLACK_S
    assert first_text == "late"  # the shared call itself ran on for its first caller
