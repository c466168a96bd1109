"""The model facade: everything shared by all providers lives here, once.

:class:`Model` wraps one :class:`~medverify.llm.base.Provider` and adds a per-attempt timeout,
retries with exponential backoff and jitter inside a total time budget per call (and per
answer, :func:`answer_budget`), a cap on the size of a reply, a per-provider concurrency limit,
a persistent request cache and token accounting per pipeline stage (:class:`UsageLedger`);
each call and retry is told to the observers of :mod:`medverify.llm.observe` (the service's
metrics).
The limits themselves are in :mod:`medverify.llm.limits`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from pathlib import Path
from types import TracebackType

from medverify.config import Config, ModelSettings
from medverify.errors import ConfigError, ProviderError
from medverify.llm.base import ChatRequest, Completion, Message, Provider, scrub_surrogates
from medverify.llm.cache import RequestCache
from medverify.llm.limits import (
    BudgetSpent,
    CallClock,
    Deadline,
    ReplyTooLarge,
    answer_deadline,
    check_reply_size,
)
from medverify.llm.limits import answer_budget as _answer_budget
from medverify.llm.observe import CallEvent, notify_call, notify_retry, observers
from medverify.llm.spec import ModelSpec, parse_spec, providers
from medverify.records import Usage

log = logging.getLogger("medverify.llm")

_SEMAPHORES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]]
_SEMAPHORES = weakref.WeakKeyDictionary()


def provider_semaphore(provider_id: str, limit: int) -> asyncio.Semaphore:
    """The concurrency limit shared by every Model of ``provider_id`` in the running loop.

    Semaphores are bound to an event loop, so there is one per (loop, provider); the first
    Model to ask in a loop sets the limit.
    """
    per_loop = _SEMAPHORES.setdefault(asyncio.get_running_loop(), {})
    if provider_id not in per_loop:
        per_loop[provider_id] = asyncio.Semaphore(limit)
    return per_loop[provider_id]


class UsageLedger(Mapping[str, Usage]):
    """Token accounting per pipeline stage: stage name -> :class:`Usage`.

    ``calls`` counts completions obtained from the provider and ``cached_calls`` those served
    by the request cache; tokens count only real calls (a cache hit costs nothing). Share
    one ledger between several Models to get one per-stage total for a pipeline.
    """

    def __init__(self) -> None:
        self._stages: dict[str, Usage] = {}

    def record(self, stage: str, completion: Completion) -> None:
        """Account one completion (a cache hit when ``completion.cached``)."""
        if completion.cached:
            delta = Usage(cached_calls=1)
        else:
            delta = Usage(calls=1, prompt_tokens=completion.usage.prompt_tokens,
                          completion_tokens=completion.usage.completion_tokens)
        self.add(stage, delta)

    def add(self, stage: str, usage: Usage) -> None:
        self._stages[stage] = self._stages.get(stage, Usage()).add(usage)

    def total(self) -> Usage:
        total = Usage()
        for usage in self._stages.values():
            total = total.add(usage)
        return total

    def as_dict(self) -> dict[str, Usage]:
        """A snapshot, e.g. for ``Report.usage``."""
        return dict(self._stages)

    def __getitem__(self, stage: str) -> Usage:
        return self._stages[stage]

    def __iter__(self) -> Iterator[str]:
        return iter(self._stages)

    def __len__(self) -> int:
        return len(self._stages)

    def __repr__(self) -> str:
        return f"UsageLedger({self._stages!r})"


class Model:
    """A provider plus timeouts, retries, a concurrency limit, a cache and usage accounting.

    Make one with :func:`get_model`; close it with ``await model.aclose()`` (or
    ``async with model``) to release the provider's HTTP client and the cache file.
    """

    def __init__(self, provider: Provider, settings: ModelSettings | None = None, *,
                 spec: str | None = None, name: str | None = None,
                 cache: RequestCache | None = None, ledger: UsageLedger | None = None,
                 owns_cache: bool = False) -> None:
        self.provider = provider
        self.settings = settings or ModelSettings()
        self._spec = spec or provider.id
        self._name = name or str(getattr(provider, "model", provider.id))
        self._cache = cache if self.settings.cache else None
        self._owns_cache = owns_cache
        self.usage = ledger if ledger is not None else UsageLedger()
        self._inflight: dict[str, asyncio.Task[Completion]] = {}

    @property
    def id(self) -> str:
        """The provider id (endpoint + model), used for caching and provenance."""
        return self.provider.id

    @property
    def spec(self) -> str:
        """The spec string this model was made from."""
        return self._spec

    @property
    def name(self) -> str:
        """The provider-side model name."""
        return self._name

    @property
    def cache(self) -> RequestCache | None:
        return self._cache

    def __repr__(self) -> str:
        return f"Model({self._spec!r})"

    async def complete(self, messages: Sequence[Message], *, stage: str,
                       temperature: float = 0.0, max_tokens: int | None = None,
                       json_mode: bool = False, seed: int | None = None,
                       cache: bool = True, top_logprobs: int | None = None) -> Completion:
        """Ask the model; cached, retried and accounted under ``stage``.

        ``top_logprobs``: ask for the generated tokens' log-probabilities with this many
        alternatives each (``Completion.logprobs``; None when the server sends none).

        Raises :class:`ProviderError` when the provider fails for good (non-retryable error,
        or retries exhausted) and :class:`ConfigError` when e.g. the API key is missing.
        """
        request = ChatRequest(model=self._name, messages=tuple(messages),
                              temperature=temperature, max_tokens=max_tokens,
                              json_mode=json_mode, seed=seed, top_logprobs=top_logprobs)
        store = self._cache if cache else None
        key = request.cache_key(self.id) if store is not None else None
        # a stored entry far over the reply cap (kept before there was one) is not loaded
        started = time.perf_counter()
        try:
            completion = (store.get(key, max_chars=2 * self.settings.max_reply_bytes)
                          if store is not None and key else None)
            if completion is None and key is not None:
                completion = await self._single_flight(key, request, stage)
            elif completion is None:
                completion = await self._call_with_retries(request, stage)
        except Exception as exc:
            if observers():  # the service's metrics (medverify.llm.observe)
                notify_call(CallEvent(self.id, stage, "error", time.perf_counter() - started,
                                      error=type(exc).__name__))
            raise
        self.usage.record(stage, completion)
        _log_call(stage, self.id, completion)
        if observers():
            notify_call(_call_event(self.id, stage, completion, time.perf_counter() - started))
        return completion

    async def _single_flight(self, key: str, request: ChatRequest, stage: str) -> Completion:
        """One provider call for identical cacheable requests in flight at the same time:
        the first caller's call is shared (and cached); the others get it as a cache hit."""
        task = self._inflight.get(key)
        if task is not None:
            completion = await _shared(task, answer_deadline())
            return completion.model_copy(update={"cached": True})
        task = asyncio.ensure_future(self._call_and_store(key, request, stage))
        self._inflight[key] = task
        task.add_done_callback(partial(self._forget, key))
        return await asyncio.shield(task)

    def _forget(self, key: str, task: asyncio.Task[Completion]) -> None:
        self._inflight.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here too, so a failure nobody awaits is not logged

    async def _call_and_store(self, key: str, request: ChatRequest, stage: str) -> Completion:
        completion = await self._call_with_retries(request, stage)
        if self._cache is not None:
            self._cache.put(key, self.id, completion)
        return completion

    async def _call_with_retries(self, request: ChatRequest, stage: str) -> Completion:
        """Attempts with backoff until one succeeds, an error is not retryable, retries run
        out or the time budget (the call's, the answer's) would not cover another attempt."""
        attempts = self.settings.max_retries + 1
        clock = CallClock(self.settings.call_budget_s, answer_deadline())
        for attempt in range(1, attempts + 1):
            try:
                return await self._attempt(request, clock)
            except ProviderError as exc:
                if not exc.retryable:
                    kind = type(exc) if isinstance(exc, BudgetSpent | ReplyTooLarge) \
                        else ProviderError  # the limits' own kinds stay recognisable
                    raise kind(f"{self.id} ({stage}): {exc}", status=exc.status) from exc
                if attempt == attempts:
                    raise ProviderError(
                        f"{self.id} ({stage}): gave up after {attempts} attempts: {exc}",
                        status=exc.status, retryable=True, retry_after=exc.retry_after,
                    ) from exc
                delay = self.backoff(attempt, exc.retry_after)
                try:
                    clock.check_wait(delay, exc)
                except BudgetSpent as spent:
                    raise BudgetSpent(f"{self.id} ({stage}): {spent}",
                                      status=exc.status) from exc
                log.debug("stage=%s model=%s attempt %d/%d failed (%s); retrying in %.3f s",
                          stage, self.id, attempt, attempts, exc, delay)
                notify_retry(self.id, stage)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _attempt(self, request: ChatRequest, clock: CallClock) -> Completion:
        semaphore = provider_semaphore(self.id, self.settings.concurrency)
        await _acquire(semaphore, clock)
        try:
            clock.start_attempt()
            timeout, deadline = clock.attempt_timeout(self.settings.timeout_s)
            started = time.perf_counter()
            try:
                completion = await asyncio.wait_for(self.provider.complete(request), timeout)
            except TimeoutError:
                if deadline is not None:
                    raise deadline.spent(f"no reply (attempt {clock.attempts})") from None
                raise ProviderError(f"no reply within {timeout:g} s", retryable=True) from None
        finally:
            semaphore.release()
        check_reply_size(completion.text, self.settings.max_reply_bytes, self.id)
        update: dict[str, object] = {"text": scrub_surrogates(completion.text)}
        if completion.latency_s is None:
            update["latency_s"] = time.perf_counter() - started
        return completion.model_copy(update=update)

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based): exponential with
        jitter, at least ``retry_after`` when the server said so, capped at backoff_max_s."""
        base = self.settings.backoff_s * 2 ** (attempt - 1)
        delay = base * random.uniform(0.5, 1.0)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.settings.backoff_max_s)

    async def aclose(self) -> None:
        """Close the provider's client and, when this Model opened it, the cache."""
        close = getattr(self.provider, "aclose", None)
        if close is not None:
            await close()
        if self._owns_cache and self._cache is not None:
            self._cache.close()

    async def __aenter__(self) -> Model:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()


async def _shared(task: asyncio.Task[Completion], deadline: Deadline | None) -> Completion:
    """Another caller's call of the same request, waited for within this answer's time (the
    call itself runs on, under its first caller's budgets)."""
    if deadline is None:
        return await asyncio.shield(task)
    try:
        return await asyncio.wait_for(asyncio.shield(task), max(deadline.left(), 0.0))
    except TimeoutError:
        raise deadline.spent("no reply yet to the same request made by another "
                             "caller") from None


async def _acquire(semaphore: asyncio.Semaphore, clock: CallClock) -> None:
    """Take a concurrency slot, waiting no longer than the time budget allows."""
    deadline = clock.binding()
    if deadline is None:
        await semaphore.acquire()
        return
    try:
        if deadline.left() <= 0:
            raise TimeoutError
        await asyncio.wait_for(semaphore.acquire(), deadline.left())
    except TimeoutError:
        raise deadline.spent("still waiting for a free slot (all [llm] concurrency "
                             "calls of this model in flight)") from None


def answer_budget(model: Model | None) -> AbstractContextManager[None]:
    """The per-answer time budget of ``model``'s calls (``[llm] answer_budget_s``, at least
    one call's budget): calls made inside, also by tasks started inside, end as ERROR when it
    runs out. A no-op without a model or with the budget 0
    (:func:`medverify.llm.limits.answer_budget`)."""
    if model is None or model.settings.answer_budget_s <= 0:
        return nullcontext()
    return _answer_budget(max(model.settings.answer_budget_s, model.settings.call_budget_s))


def _call_event(model_id: str, stage: str, completion: Completion, seconds: float) -> CallEvent:
    if completion.cached:
        return CallEvent(model_id, stage, "cached", seconds)
    return CallEvent(model_id, stage, "ok", seconds, completion.usage.prompt_tokens,
                     completion.usage.completion_tokens)


def _log_call(stage: str, model_id: str, completion: Completion) -> None:
    if not log.isEnabledFor(logging.DEBUG):
        return
    usage = completion.usage
    log.debug("stage=%s model=%s cached=%s latency=%.3fs prompt_tokens=%d "
              "completion_tokens=%d%s", stage, model_id, completion.cached,
              completion.latency_s or 0.0, usage.prompt_tokens, usage.completion_tokens,
              " (estimated)" if usage.estimated else "")


def get_model(spec: str | ModelSpec, settings: ModelSettings | None = None, *,
              cache_path: Path | str | None = None, ledger: UsageLedger | None = None) -> Model:
    """Make a :class:`Model` from a spec string such as ``openai:gpt-4o-mini``.

    ``settings`` (default :class:`ModelSettings`) are overridden by the spec's options.
    ``cache_path`` names the request cache, a SQLite file or a PostgreSQL URL (None: no
    persistent cache, e.g. ``Config.request_cache_path`` in a pipeline). Raises
    :class:`ConfigError` for a bad spec.
    """
    parsed = parse_spec(spec) if isinstance(spec, str) else spec
    effective = parsed.apply(settings)
    provider = providers.create(parsed.provider, parsed, effective)
    slow = getattr(provider, "default_timeout_s", None)  # e.g. an in-process CPU model
    if isinstance(slow, float):
        effective = _for_slow_provider(effective, slow, parsed)
    cache = RequestCache(cache_path) if cache_path is not None and effective.cache else None
    return Model(provider, effective, spec=str(spec), name=parsed.model, cache=cache,
                 ledger=ledger, owns_cache=True)


def _for_slow_provider(settings: ModelSettings, slow: float, spec: ModelSpec) -> ModelSettings:
    """Settings for a provider that declares it is slow (an in-process CPU model: slow,
    never stalled): the timeout and call budget at least its own timeout, and no answer
    budget, unless the spec or the settings set them."""
    update: dict[str, float] = {}
    if spec.timeout_s is None and slow > settings.timeout_s:
        update["timeout_s"] = slow
    explicit = settings.model_fields_set
    if (spec.call_budget_s is None and "call_budget_s" not in explicit
            and 0 < settings.call_budget_s < slow):
        update["call_budget_s"] = slow
    if "answer_budget_s" not in explicit:
        update["answer_budget_s"] = 0.0
    return settings.model_copy(update=update) if update else settings


def model_from_config(config: Config, spec: str | None = None, *,
                      ledger: UsageLedger | None = None) -> Model:
    """The model ``spec`` (default: the configured one) with the config's settings and, when
    ``[llm] cache`` is on, its persistent request cache."""
    chosen = spec or config.model
    if not chosen:
        raise ConfigError("no model configured: pass --model SPEC (see docs/models.md)")
    cache = config.request_cache_path if config.llm.cache else None
    return get_model(chosen, config.llm, cache_path=cache, ledger=ledger)
