"""OpenAI-compatible chat provider (OpenAI, vLLM, Ollama, llama.cpp server, LM Studio, ...).

One ``httpx.AsyncClient`` per provider, created on first use and closed by ``aclose``; its
connection pool's streams look their socket up once (:mod:`medverify.llm.http_pool`).
HTTP failures become :class:`ProviderError`: 429, 5xx, timeouts and connection errors are
retryable (the model facade retries them); other 4xx and malformed replies are not. The body
is streamed and read up to ``[llm] max_reply_bytes`` (:func:`medverify.llm.limits.read_capped`):
a larger reply is refused without being read in full.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from medverify.config import ModelSettings
from medverify.errors import ConfigError, ProviderError
from medverify.llm.base import (
    ChatRequest,
    Completion,
    Message,
    TokenCount,
    TokenLogprobs,
    TopLogprob,
    scrub_surrogates,
)
from medverify.llm.http_pool import use_socket_once
from medverify.llm.limits import read_capped
from medverify.llm.spec import ModelSpec, providers

log = logging.getLogger("medverify.llm.openai_compat")

_SNIPPET = 200
_ERROR_BODY_BYTES = 8192  # of an error reply, only a snippet is shown
LOGPROB_FLOOR = -9999.0  # what OpenAI itself reports for "practically impossible"


@dataclass(frozen=True)
class Endpoint:
    """Defaults of one named OpenAI-compatible service."""

    base_url: str | None
    key_env: str | None = None


ENDPOINTS: dict[str, Endpoint] = {
    "openai": Endpoint("https://api.openai.com/v1", "OPENAI_API_KEY"),
    "vllm": Endpoint("http://localhost:8000/v1"),
    "ollama": Endpoint("http://localhost:11434/v1"),
    "llamacpp": Endpoint("http://localhost:8080/v1"),
    "lmstudio": Endpoint("http://localhost:1234/v1"),
    "openai-compatible": Endpoint(None),
}


def register_endpoint(kind: str, base_url: str | None, key_env: str | None = None) -> None:
    """Add a named OpenAI-compatible service, usable as ``kind:MODEL`` in specs."""
    ENDPOINTS[kind] = Endpoint(base_url.rstrip("/") if base_url else None, key_env)
    providers.register(kind, from_spec)


def from_spec(spec: ModelSpec, settings: ModelSettings) -> OpenAICompatProvider:
    """Registry factory for every OpenAI-compatible kind."""
    endpoint = ENDPOINTS.get(spec.provider, Endpoint(None))
    base_url = spec.base_url or endpoint.base_url
    if base_url is None:
        raise ConfigError(f"model spec {spec}: {spec.provider} needs a base URL, "
                          f"e.g. {spec.provider}:{spec.model}@http://localhost:8000/v1")
    return OpenAICompatProvider(
        kind=spec.provider, model=spec.model, base_url=base_url,
        key_env=spec.key_env or endpoint.key_env, timeout_s=settings.timeout_s,
        max_connections=settings.concurrency, max_reply_bytes=settings.max_reply_bytes,
    )


class OpenAICompatProvider:
    """POST ``{base_url}/chat/completions``. The API key is read from ``$key_env`` at first use
    and is only ever held in the HTTP client's headers. A reply body over
    ``max_reply_bytes`` is a non-retryable error, read no further."""

    def __init__(self, *, kind: str, model: str, base_url: str, key_env: str | None = None,
                 timeout_s: float = 60.0, max_connections: int = 8,
                 max_reply_bytes: int = 1_000_000) -> None:
        self.kind = kind
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.key_env = key_env
        self.id = f"{kind}:{model}@{self.base_url}"
        self._timeout_s = timeout_s
        self._max_connections = max_connections
        self.max_reply_bytes = max_reply_bytes
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._json_mode_supported = True
        self._url: tuple[str, str, httpx.URL] | None = None  # base_url, url, parsed url

    def __repr__(self) -> str:
        return f"OpenAICompatProvider({self.id!r}, key_env={self.key_env!r})"

    @property
    def url(self) -> str:
        return self._endpoint()[0]

    def _endpoint(self) -> tuple[str, httpx.URL]:
        """:attr:`url` as text and parsed, parsed once (from text httpx would parse it twice
        per request)."""
        if self._url is None or self._url[0] != self.base_url:
            text = f"{self.base_url}/chat/completions"
            self._url = (self.base_url, text, httpx.URL(text))
        return self._url[1], self._url[2]

    async def complete(self, request: ChatRequest) -> Completion:
        json_mode = request.json_mode and self._json_mode_supported
        started = time.perf_counter()
        try:
            data = await self._post(_payload(request, json_mode=json_mode))
        except ProviderError as exc:
            if not (json_mode and exc.status == 400):
                raise
            log.warning("%s rejected response_format=json_object (%s); retrying without it",
                        self.id, exc)
            self._json_mode_supported = False
            data = await self._post(_payload(request, json_mode=False))
        return _completion(data, request, self.url, time.perf_counter() - started)

    async def _post(self, payload: dict[str, Any]) -> Any:
        client = self._get_client()
        url, parsed = self._endpoint()
        try:
            async with client.stream("POST", parsed, json=payload) as response:
                failed = response.status_code >= 400
                cap = _ERROR_BODY_BYTES if failed else self.max_reply_bytes
                body = await read_capped(response, cap, url, truncate=failed)
        except httpx.TimeoutException as exc:
            raise ProviderError(f"{self.url}: no reply within {self._timeout_s:g} s "
                                f"({type(exc).__name__})", retryable=True) from exc
        except httpx.TransportError as exc:
            raise ProviderError(f"cannot reach {self.url}: {type(exc).__name__}: {exc}",
                                retryable=True) from exc
        if failed:
            raise self._http_error(response, body)
        return _json_bytes(body, response.status_code, self.url)

    def _get_client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            # A client is bound to the event loop it first ran in; a new loop needs a new one.
            self._client = httpx.AsyncClient(
                headers=self._headers(), timeout=httpx.Timeout(self._timeout_s),
                limits=httpx.Limits(max_connections=max(self._max_connections, 1) * 2,
                                    max_keepalive_connections=self._max_connections),
            )
            use_socket_once(self._client)  # the pool's idle checks without socket look-ups
            self._client_loop = loop
        return self._client

    def _headers(self) -> dict[str, str]:
        if not self.key_env:
            return {}
        key = os.environ.get(self.key_env, "").strip()
        if not key:
            raise ConfigError(f"{self.id} needs an API key: set the environment variable "
                              f"{self.key_env}")
        return {"Authorization": f"Bearer {key}"}

    def _http_error(self, response: httpx.Response, body: bytes) -> ProviderError:
        status = response.status_code
        detail = f"{self.url} answered HTTP {status}: {_snippet(_text(body))}"
        if status == 429 or status == 408 or status >= 500:
            return ProviderError(detail, status=status, retryable=True,
                                 retry_after=retry_after(response.headers))
        if status in (401, 403):
            return ProviderError(f"{detail}; {self._key_hint()}", status=status)
        if status == 404:
            return ProviderError(f"{detail}; check the model name {self.model!r} and the base "
                                 f"URL {self.base_url}", status=status)
        return ProviderError(detail, status=status)

    def _key_hint(self) -> str:
        if self.key_env:
            return f"check the API key in ${self.key_env}"
        return "the server wants an API key: add ?key_env=YOUR_VAR to the model spec"

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        try:
            await client.aclose()
        except RuntimeError:  # its event loop is gone; nothing left to close cleanly
            log.debug("%s: client of a closed event loop dropped", self.id)


def _payload(request: ChatRequest, *, json_mode: bool) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": request.model,
        "messages": [{"role": m.role, "content": m.content} for m in request.messages],
        "temperature": request.temperature,
    }
    if request.max_tokens is not None:
        payload["max_tokens"] = request.max_tokens
    if request.seed is not None:
        payload["seed"] = request.seed
    if json_mode:
        payload["response_format"] = {"type": "json_object"}
    if request.top_logprobs is not None:
        payload["logprobs"] = True
        payload["top_logprobs"] = request.top_logprobs
    payload.update(request.extra)
    return payload


def _json_body(response: httpx.Response, url: str) -> Any:
    """The JSON of a read ``response`` (see :func:`_json_bytes`)."""
    return _json_bytes(response.content, response.status_code, url)


def _json_bytes(body: bytes, status: int, url: str) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, too deep, an integer too long
        raise ProviderError(f"malformed reply from {url} (not JSON): "
                            f"{_snippet(_text(body))}", status=status) from None


def _text(body: bytes) -> str:
    """The start of a body as text, for error messages."""
    return body[: 4 * _SNIPPET].decode("utf-8", "replace")


def _completion(data: Any, request: ChatRequest, url: str, latency_s: float) -> Completion:
    try:
        choice = data["choices"][0]
        message = choice["message"]
        text = message.get("content") or ""
        finish_reason = choice.get("finish_reason")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise ProviderError(f"malformed reply from {url} (no choices[0].message): "
                            f"{_snippet(json.dumps(data))}") from None
    if not isinstance(text, str):
        raise ProviderError(f"malformed reply from {url} (content is not text): "
                            f"{_snippet(json.dumps(data))}")
    text = scrub_surrogates(text)
    return Completion(
        text=text, model=scrub_surrogates(str(data.get("model") or request.model)),
        usage=_usage(data.get("usage"), request.messages, text),
        finish_reason=scrub_surrogates(finish_reason) if isinstance(finish_reason, str) else None,
        latency_s=latency_s,
        logprobs=_logprobs(choice, url) if request.top_logprobs is not None else None,
    )


def _logprobs(choice: dict[str, Any], url: str) -> list[TokenLogprobs] | None:
    """``choices[0].logprobs.content`` (OpenAI shape) as records; None when the server sent
    none. A shape this parser does not know is logged and read as none: the text is still
    good, and the caller decides what a reply without log-probabilities means."""
    raw = choice.get("logprobs")
    content = raw.get("content") if isinstance(raw, dict) else None
    if content is None:
        return None
    try:
        return [_token_logprobs(item) for item in content]
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as exc:
        log.warning("%s: unreadable logprobs in the reply ignored (%s: %s): %s", url,
                    type(exc).__name__, exc, _snippet(json.dumps(raw)))
        return None


def _token_logprobs(item: dict[str, Any]) -> TokenLogprobs:
    top = [TopLogprob(token=scrub_surrogates(str(alt["token"])),
                      logprob=_finite(alt["logprob"]))
           for alt in item.get("top_logprobs") or ()]
    return TokenLogprobs(token=scrub_surrogates(str(item["token"])),
                         logprob=_finite(item["logprob"]), top=top)


def _finite(value: Any) -> float:
    """A log-probability, floored at LOGPROB_FLOOR (servers may send -inf or -9999)."""
    number = float(value)
    if math.isnan(number) or number > 1e-6:
        raise ValueError(f"not a log-probability: {value!r}")
    return min(max(number, LOGPROB_FLOOR), 0.0)


def _usage(raw: Any, messages: tuple[Message, ...], text: str) -> TokenCount:
    if isinstance(raw, dict) and isinstance(raw.get("prompt_tokens"), int):
        completion_tokens = raw.get("completion_tokens") or 0
        if isinstance(completion_tokens, int):
            return TokenCount(prompt_tokens=raw["prompt_tokens"],
                              completion_tokens=completion_tokens)
    return estimate_tokens(messages, text)


def estimate_tokens(messages: tuple[Message, ...], text: str) -> TokenCount:
    """Rough token counts (characters / 4) for servers that report no usage."""
    prompt_chars = sum(len(m.content) for m in messages)
    return TokenCount(prompt_tokens=-(-prompt_chars // 4), completion_tokens=-(-len(text) // 4),
                      estimated=True)


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait from ``Retry-After`` (seconds or HTTP date) or ``retry-after-ms``."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."
