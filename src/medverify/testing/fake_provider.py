"""A scripted chat provider for tests: no network, fully deterministic.

>>> from medverify.testing import ScriptedProvider, register_fake
>>> fake = ScriptedProvider(["first reply", ProviderError("busy", status=429, retryable=True),
...                          "second reply"])
>>> register_fake("judge", fake)          # now the spec "fake:judge" resolves to it
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeAlias

from medverify.config import ModelSettings
from medverify.errors import ConfigError, ProviderError
from medverify.llm.base import ChatRequest, Completion, TokenCount, TokenLogprobs, TopLogprob
from medverify.llm.spec import ModelSpec

Reply: TypeAlias = str | Completion | Exception
ReplyFunction: TypeAlias = Callable[[ChatRequest], Reply | Awaitable[Reply]]

_FAKES: dict[str, ScriptedProvider] = {}


class ScriptedProvider:
    """Answers from a list of replies (in order) or a function of the request.

    A reply is a text, a full :class:`Completion`, or an exception to raise (e.g.
    ``ProviderError("rate limited", status=429, retryable=True)``). Every request received
    is kept in ``requests``; ``delay_s`` simulates latency; ``max_in_flight`` records the
    largest number of concurrent calls seen.
    """

    def __init__(self, replies: Sequence[Reply] | ReplyFunction, *, name: str = "scripted",
                 model: str = "fake-model", delay_s: float = 0.0) -> None:
        self.id = f"fake:{name}"
        self.model = model
        self.delay_s = delay_s
        self.requests: list[ChatRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._function = replies if callable(replies) else None
        self._replies: list[Reply] = [] if callable(replies) else list(replies)
        self._given = len(self._replies)

    def __repr__(self) -> str:
        return f"ScriptedProvider({self.id!r}, requests={len(self.requests)})"

    @property
    def remaining(self) -> int:
        """Scripted replies not used yet (0 for a reply function)."""
        return len(self._replies)

    async def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            reply = await self._next(request)
        finally:
            self.in_flight -= 1
        if isinstance(reply, Exception):
            raise reply
        return _as_completion(reply, request)

    async def _next(self, request: ChatRequest) -> Reply:
        if self._function is not None:
            reply = self._function(request)
            return await reply if inspect.isawaitable(reply) else reply
        if not self._replies:
            raise ProviderError(f"{self.id}: ran out of scripted replies "
                                f"({self._given} given, request {len(self.requests)})")
        return self._replies.pop(0)


FakeProvider = ScriptedProvider


def _as_completion(reply: str | Completion, request: ChatRequest) -> Completion:
    if isinstance(reply, Completion):
        return reply
    prompt_chars = sum(len(m.content) for m in request.messages)
    usage = TokenCount(prompt_tokens=-(-prompt_chars // 4), completion_tokens=-(-len(reply) // 4))
    return Completion(text=reply, model=request.model, usage=usage, finish_reason="stop")


def logprob_reply(steps: Sequence[Mapping[str, float]], *,
                  model: str = "fake-model") -> Completion:
    """A scripted reply with log-probabilities: one mapping of token -> probability per
    generated position. The generated token is each position's most likely one (the
    first on ties); the text is those tokens joined.

    >>> logprob_reply([{"Yes": 0.6, " yes": 0.1, "No": 0.2, "maybe": 0.1}]).text
    'Yes'
    """
    tokens = [_step(probabilities) for probabilities in steps]
    text = "".join(token.token for token in tokens)
    usage = TokenCount(prompt_tokens=1, completion_tokens=len(tokens))
    return Completion(text=text, model=model, usage=usage, finish_reason="stop",
                      logprobs=tokens)


def _step(probabilities: Mapping[str, float]) -> TokenLogprobs:
    if not probabilities or any(not 0.0 < p <= 1.0 for p in probabilities.values()):
        raise ValueError(f"each step needs probabilities in (0, 1]: {dict(probabilities)}")
    ranked = sorted(probabilities.items(), key=lambda item: -item[1])
    top = [TopLogprob(token=token, logprob=math.log(p)) for token, p in ranked]
    return TokenLogprobs(token=top[0].token, logprob=top[0].logprob, top=top)


def register_fake(name: str, provider: ScriptedProvider) -> ScriptedProvider:
    """Make the spec ``fake:<name>`` resolve to ``provider``; returns it."""
    _FAKES[name] = provider
    return provider


def registered_fake(name: str) -> ScriptedProvider:
    """The provider registered as ``fake:<name>`` (e.g. to count its ``requests``)."""
    try:
        return _FAKES[name]
    except KeyError:
        raise ConfigError(f"no fake provider registered as {name!r}") from None


def unregister_fake(name: str) -> None:
    _FAKES.pop(name, None)


def from_spec(spec: ModelSpec, settings: ModelSettings) -> ScriptedProvider:
    """Registry factory for ``fake:<name>`` specs."""
    if spec.base_url:
        raise ConfigError(f"model spec {spec}: fake providers take no base URL")
    try:
        return _FAKES[spec.model]
    except KeyError:
        known = ", ".join(sorted(_FAKES)) or "none"
        raise ConfigError(
            f"no fake provider registered as {spec.model!r} (registered: {known}); call "
            f"medverify.testing.register_fake({spec.model!r}, ScriptedProvider([...])) first"
        ) from None
