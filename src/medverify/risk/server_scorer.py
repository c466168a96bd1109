"""Log-probability scorers of vLLM-style servers (``vllm:MODEL@URL``,
``openai-compatible:MODEL@URL``; the seam, the prompt and the local models are in
:mod:`medverify.risk.scorers`).

``POST {URL}/completions`` with ``prompt_logprobs`` (vLLM's extension). A server that answers
without them is asked once more the legacy OpenAI way, ``echo: true`` with ``logprobs: k``
(the prompt's tokens come back in ``choices[0].logprobs``: llama-cpp-python's server does
this), and then only that way. Endpoints that return neither give an error trace. Servers
tokenize the whole text and the answer's tokens are found by walking the decoded tokens back
from the end (:func:`steps_from_prompt_logprobs`, :func:`steps_from_echo_logprobs`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from typing import Any

import httpx

from medverify.config import RiskSettings
from medverify.errors import ConfigError
from medverify.llm.limits import ReplyTooLarge, read_capped
from medverify.risk.records import TokenStep, TokenTrace, TopToken
from medverify.risk.scorers import (
    EMPTY_ANSWER,
    NO_PROMPT_LOGPROBS,
    ItemError,
    ScoreItem,
    _trace,
    normalize_spans,
    render_prompt,
)

log = logging.getLogger("medverify.risk.scorers")


def openai_from_spec(spec: str, settings: RiskSettings) -> OpenAICompatScorer:
    from medverify.llm.openai_compat import ENDPOINTS
    from medverify.llm.spec import parse_spec

    parsed = parse_spec(spec)
    endpoint = ENDPOINTS.get(parsed.provider)
    base_url = parsed.base_url or (endpoint.base_url if endpoint else None)
    if not base_url:
        raise ConfigError(f"scorer {spec!r} needs a base URL, e.g. "
                          f"{parsed.provider}:{parsed.model}@http://localhost:8000/v1")
    return OpenAICompatScorer(
        kind=parsed.provider, model=parsed.model, base_url=base_url, k=settings.top_k,
        key_env=parsed.key_env or (endpoint.key_env if endpoint else None),
        timeout_s=parsed.timeout_s or 60.0, concurrency=parsed.concurrency or 8,
        max_retries=3 if parsed.max_retries is None else parsed.max_retries,
        max_reply_bytes=settings.max_reply_bytes)


class _Unsupported(ItemError):
    """The server gives no prompt log-probabilities."""


class OpenAICompatScorer:
    """``POST {base_url}/completions`` with ``prompt_logprobs: k`` (vLLM), one request per
    item, ``concurrency`` at a time. 429, 5xx, timeouts and connection errors are retried
    (``max_retries`` times, exponential backoff from ``backoff_s``, or ``Retry-After``).
    vLLM caps log-probabilities at ``--max-logprobs`` (20 by default): start it with
    ``--max-logprobs 50`` for the default ``risk.top_k``."""

    def __init__(self, *, kind: str, model: str, base_url: str, k: int = 50,
                 key_env: str | None = None, timeout_s: float = 60.0, concurrency: int = 8,
                 max_retries: int = 3, backoff_s: float = 0.5,
                 max_reply_bytes: int = 32_000_000) -> None:
        self.model = model
        self.max_reply_bytes = max_reply_bytes  # [risk] max_reply_bytes
        self.base_url = base_url.rstrip("/")
        self.id = f"{kind}:{model}@{self.base_url}"
        self.k = k
        self.key_env = key_env
        self.timeout_s = timeout_s
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.echo = False  # the server answered the legacy echo request, not prompt_logprobs

    def __repr__(self) -> str:
        return f"OpenAICompatScorer({self.id!r}, key_env={self.key_env!r})"

    @property
    def url(self) -> str:
        return f"{self.base_url}/completions"

    async def score(self, items: Sequence[ScoreItem]) -> list[TokenTrace]:
        limit = asyncio.Semaphore(self.concurrency)
        async with httpx.AsyncClient(headers=self._headers(),
                                     timeout=httpx.Timeout(self.timeout_s)) as client:
            async def one(item: ScoreItem) -> TokenTrace:
                async with limit:
                    return await self._score_one(client, item)

            return list(await asyncio.gather(*(one(item) for item in items)))

    def _headers(self) -> dict[str, str]:
        if not self.key_env:
            return {}
        key = os.environ.get(self.key_env, "").strip()
        if not key:
            raise ConfigError(f"scorer {self.id} needs an API key: set the environment "
                              f"variable {self.key_env}")
        return {"Authorization": f"Bearer {key}"}

    async def _score_one(self, client: httpx.AsyncClient, item: ScoreItem) -> TokenTrace:
        if not item.answer.strip():
            return _trace(self, item, error=EMPTY_ANSWER)
        prompt = render_prompt(item)
        text = prompt + item.answer
        body = {"model": self.model, "prompt": text, "max_tokens": 1, "temperature": 0}
        try:
            if not self.echo:
                try:
                    data = await self._post(client, {**body, "prompt_logprobs": self.k})
                    steps = steps_from_prompt_logprobs(data, text, len(prompt), self.k)
                    return _trace(self, item, steps=normalize_spans(steps, item.answer))
                except _Unsupported:  # a 200 reply without them: try the legacy echo
                    pass
            data = await self._post(client, {**body, "echo": True, "logprobs": self.k})
            steps = steps_from_echo_logprobs(data, text, len(prompt), self.k)
            self.echo = True
        except ItemError as exc:
            return _trace(self, item, error=str(exc))
        return _trace(self, item, steps=normalize_spans(steps, item.answer))

    async def _post(self, client: httpx.AsyncClient, body: dict[str, Any]) -> Any:
        attempt = 0
        while True:
            try:
                async with client.stream("POST", self.url, json=body) as response:
                    ok = response.status_code < 400
                    content = await read_capped(response, self.max_reply_bytes, self.url,
                                                truncate=not ok)
            except ReplyTooLarge as exc:  # not retried: the same request gets the same
                raise ItemError(f"{exc} ([risk] max_reply_bytes)") from None
            except httpx.TransportError as exc:  # timeouts included
                problem, wait = f"cannot reach {self.url}: {type(exc).__name__}", None
            else:
                headers = {k: v for k, v in response.headers.items()  # content is decoded
                           if k.lower() not in ("content-encoding", "content-length")}
                reply = httpx.Response(response.status_code, headers=headers, content=content)
                if ok:
                    return _json(reply, self.url)
                problem, wait = self._http_problem(reply)
            if wait is False or attempt >= self.max_retries:
                raise ItemError(problem)
            delay = wait if isinstance(wait, float) else min(self.backoff_s * 2**attempt, 8.0)
            log.info("%s: %s; retrying in %.2f s", self.id, problem, delay)
            await asyncio.sleep(delay)
            attempt += 1

    def _http_problem(self, response: httpx.Response) -> tuple[str, float | bool | None]:
        """(message, retry delay: a float, None for the default backoff, False: no retry)."""
        from medverify.llm.openai_compat import retry_after

        status = response.status_code
        detail = f"{self.url} answered HTTP {status}: {_snippet(response.text)}"
        if status in (408, 429) or status >= 500:
            return detail, retry_after(response.headers)
        if status == 404 and "model" in response.text.lower():
            return f"{detail}; check the model name {self.model!r}", False
        if status in (400, 404, 405, 422):
            hint = (f"; vLLM caps log-probabilities at --max-logprobs (default 20): start it "
                    f"with --max-logprobs {self.k} or lower risk.top_k"
                    if "logprob" in response.text.lower() and status == 400 else "")
            return f"{NO_PROMPT_LOGPROBS} ({detail}){hint}", False
        if status in (401, 403):
            where = f"${self.key_env}" if self.key_env else "?key_env=VAR in the spec"
            return f"{detail}; check the API key ({where})", False
        return detail, False


def _json(response: httpx.Response, url: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise ItemError(f"malformed reply from {url} (not JSON): "
                        f"{_snippet(response.text)}") from None


def _snippet(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def steps_from_prompt_logprobs(data: Any, text: str, answer_start: int,
                               k: int) -> list[TokenStep]:
    """Answer steps from a vLLM completions reply scored over ``text`` (prompt + answer,
    the answer starting at ``answer_start``). ``prompt_logprobs`` holds, per prompt token,
    ``None`` (the first) or ``{token_id: {logprob, rank, decoded_token}}``: the prompt
    token itself (listed first by vLLM) and the top-k. The prompt tokens are found by
    walking their decoded texts back from the end of ``text``."""
    return _walk(_prompt_logprobs(data), text, answer_start, k)


def steps_from_echo_logprobs(data: Any, text: str, answer_start: int,
                             k: int) -> list[TokenStep]:
    """Answer steps from a legacy OpenAI completions reply to ``echo: true, logprobs: k``
    over ``text``: ``choices[0].logprobs`` holds ``tokens``, ``token_logprobs`` (``None``
    for the first) and ``top_logprobs`` (``{token text: logprob}``, the top-k plus the
    token itself) for the prompt's tokens, then for the generated ones (dropped: as many as
    ``usage.completion_tokens``, or those whose ``text_offset`` is past ``text``). The rank
    is counted in the top-k: the position of the token among them, ``k + 1`` (a lower
    bound) when it is not among them. Tokens with the same text share one key of
    ``top_logprobs`` (llama-cpp-python), so then fewer than k alternatives come back and a
    rank can be too small by the number of merged ones."""
    return _walk(_echo_entries(data, len(text), k), text, answer_start, k)


def _echo_entries(data: Any, n_chars: int, k: int) -> list[Any]:
    choice: Any = None
    if isinstance(data, dict) and isinstance(data.get("choices"), list) and data["choices"]:
        choice = data["choices"][0]
    raw = choice.get("logprobs") if isinstance(choice, dict) else None
    tokens = raw.get("tokens") if isinstance(raw, dict) else None
    values = raw.get("token_logprobs") if isinstance(raw, dict) else None
    if not isinstance(tokens, list) or not isinstance(values, list) or len(tokens) < 2:
        raise _Unsupported(NO_PROMPT_LOGPROBS)
    tops = raw.get("top_logprobs") or [None] * len(tokens)
    offsets = raw.get("text_offset")
    usage = data.get("usage")
    generated = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(generated, int) and 0 <= generated < len(tokens):
        n = len(tokens) - generated
    elif isinstance(offsets, list) and len(offsets) == len(tokens):
        n = sum(1 for off in offsets if isinstance(off, int) and off < n_chars)
    else:
        n = len(tokens)
    if not (len(values) == len(tops) == len(tokens)):
        raise ItemError(f"malformed echo logprobs: {_snippet(repr(raw))}")
    entries: list[Any] = []
    for token, value, top in zip(tokens[:n], values[:n], tops[:n], strict=True):
        if value is None:
            entries.append(None)
            continue
        try:
            logprob = float(value)
            listed = sorted(((str(t), float(v)) for t, v in (top or {}).items()),
                            key=lambda tv: -tv[1])
        except (AttributeError, TypeError, ValueError):
            raise ItemError(f"malformed echo logprobs entry: {_snippet(repr(top))}") from None
        alts = listed[:k]
        better = sum(1 for _, v in alts if v > logprob)
        # Inside the top-k for sure when a listed token is less likely; the least likely one
        # is the k-th, or (fewer than k listed: tokens with the same text share one key)
        # possibly beyond the top-k, which is what k + 1 says.
        inside = any(v < logprob for _, v in listed) or better + 1 == k
        entry = {"chosen": {"logprob": logprob, "rank": better + 1 if inside else k + 1,
                            "decoded_token": str(token)}}
        for i, (alt, v) in enumerate(alts):
            if (alt, v) != (str(token), logprob):  # the token itself is listed once
                entry[f"top{i}"] = {"logprob": v, "rank": i + 1, "decoded_token": alt}
        entries.append(entry)
    return entries


def _walk(entries: list[Any], text: str, answer_start: int, k: int) -> list[TokenStep]:
    pos = len(text)
    steps: list[TokenStep] = []
    for entry in reversed(entries):
        if pos <= answer_start:
            break
        if not entry:
            raise ItemError("could not align the server's tokens with the answer text")
        chosen = _chosen(entry, text, pos)
        start = pos - len(chosen["decoded_token"])
        steps.append(TokenStep(token=chosen["decoded_token"], start=start - answer_start,
                               end=pos - answer_start, logprob=chosen["logprob"],
                               rank=chosen["rank"], top=_top(entry, k)))
        pos = start
    if pos > answer_start:
        raise ItemError("could not align the server's tokens with the answer text")
    return steps[::-1]


def _prompt_logprobs(data: Any) -> list[Any]:
    found = None
    if isinstance(data, dict):
        choices = data.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            found = choices[0].get("prompt_logprobs")
        found = found if found is not None else data.get("prompt_logprobs")
    if not isinstance(found, list) or not found:
        raise _Unsupported(NO_PROMPT_LOGPROBS)
    return found


def _chosen(entry: Any, text: str, pos: int) -> dict[str, Any]:
    """The prompt token of one position: the first entry whose text ends at ``pos``
    (vLLM lists the prompt token first; the text check guards against other orders)."""
    candidates = _candidates(entry)
    for candidate in candidates:
        piece = candidate["decoded_token"]
        if len(piece) <= pos and text.endswith(piece, 0, pos):
            return candidate
    raise ItemError("could not align the server's tokens with the answer text "
                    f"(no token of {[c['decoded_token'] for c in candidates]!r} ends at "
                    f"character {pos})")


def _candidates(entry: Any) -> list[dict[str, Any]]:
    if not isinstance(entry, dict):
        raise ItemError(f"malformed prompt_logprobs entry: {_snippet(repr(entry))}")
    out = []
    for token_id, value in entry.items():
        try:
            out.append({"id": token_id, "logprob": float(value["logprob"]),
                        "rank": int(value["rank"]),
                        "decoded_token": str(value.get("decoded_token") or "")})
        except (KeyError, TypeError, ValueError):
            raise ItemError("malformed prompt_logprobs entry: "
                            f"{_snippet(repr(value))}") from None
    return out


def _top(entry: Any, k: int) -> list[TopToken]:
    ranked = sorted(_candidates(entry), key=lambda c: (c["rank"], -c["logprob"]))
    return [TopToken(token=c["decoded_token"], logprob=c["logprob"])
            for c in ranked if c["rank"] <= k][:k]
