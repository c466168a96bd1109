"""The chat-model seam: a provider implements one method, ``complete``.

Everything shared (timeouts, retries, concurrency limits, caching, token accounting)
lives once in :class:`medverify.llm.facade.Model`, above this seam.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class ChatRequest(BaseModel):
    """What a provider is asked. ``model`` is the provider-side model name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    messages: tuple[Message, ...]
    temperature: float = 0.0
    max_tokens: int | None = None
    json_mode: bool = False
    seed: int | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    # Ask for the log-probabilities of the generated tokens with this many alternatives
    # per position (OpenAI allows 0-20); None: no log-probabilities.
    top_logprobs: int | None = Field(default=None, ge=0)

    def cache_key(self, provider_id: str) -> str:
        """Stable key of this request for the persistent cache.

        ``top_logprobs`` is part of the key only when set, so keys of requests without it
        are the same as before the field existed (existing caches stay valid).
        """
        fields = self.model_dump(mode="json")
        if fields["top_logprobs"] is None:
            del fields["top_logprobs"]
        payload = json.dumps(
            {"provider": provider_id, **fields}, sort_keys=True, ensure_ascii=False,
        )
        return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


class TokenCount(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False  # True when the server reported no usage (chars / 4)


class TopLogprob(BaseModel):
    """One alternative token at a generated position."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token: str
    logprob: float  # natural log; finite (very unlikely tokens are floored, e.g. -9999)


class TokenLogprobs(BaseModel):
    """One generated token, its log-probability and the most likely alternatives
    (most likely first; usually including the token itself)."""

    model_config = ConfigDict(extra="forbid")

    token: str
    logprob: float
    top: list[TopLogprob] = Field(default_factory=list)


_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def scrub_surrogates(text: str) -> str:
    """``text`` with lone surrogates (a JSON ``"\\ud800"`` escape decodes to one) replaced by
    U+FFFD: they cannot be encoded as UTF-8, so the request cache, the run store and every
    JSONL writer would fail on them later."""
    return _LONE_SURROGATE.sub("\ufffd", text)


class Completion(BaseModel):
    """A provider's reply. ``logprobs``: per generated token, when the request asked for
    ``top_logprobs`` and the server returned them (None otherwise)."""

    model_config = ConfigDict(extra="forbid")

    text: str
    model: str
    usage: TokenCount = Field(default_factory=TokenCount)
    finish_reason: str | None = None
    cached: bool = False
    latency_s: float | None = None
    logprobs: list[TokenLogprobs] | None = None


@runtime_checkable
class Provider(Protocol):
    """A chat model backend. ``id`` identifies the endpoint + model for caching and
    provenance (e.g. ``openai:gpt-4o-mini@https://api.openai.com/v1``).

    ``complete`` raises :class:`medverify.errors.ProviderError` on failure, with
    ``retryable=True`` for 429, 5xx, timeouts and connection errors.
    """

    id: str

    async def complete(self, request: ChatRequest) -> Completion: ...
