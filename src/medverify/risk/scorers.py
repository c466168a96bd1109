"""Log-probability scorers: force an answer through a language model, token by token.

One seam, :class:`Scorer`: ``await scorer.score(items)`` gives one :class:`TokenTrace` per
:class:`ScoreItem`, in order. A failure for one item is a trace with ``error`` set, never an
exception (configuration problems, e.g. a missing model directory or API key, do raise
:class:`~medverify.errors.ConfigError`). Scorers are made from spec strings with
:func:`make_scorer` (factories in :data:`SCORERS`, by spec prefix):

``hf:/path/to/model``
    A local Hugging Face causal LM directory (never downloaded: ``local_files_only``).
    float32 on a CPU, bfloat16 on CUDA (``risk.device``: auto, cpu or cuda).
``vllm:MODEL@URL`` / ``openai-compatible:MODEL@URL``
    ``POST {URL}/completions`` with ``prompt_logprobs`` (vLLM's extension). A server that
    answers without them is asked once more the legacy OpenAI way, ``echo: true`` with
    ``logprobs: k`` (the prompt's tokens come back in ``choices[0].logprobs``:
    llama-cpp-python's server does this), and then only that way. Endpoints that return
    neither (the OpenAI chat models, Ollama, llama.cpp's own ``llama-server``, most hosted
    APIs) give an error trace: the log-probabilities of *generated* text
    (``logprobs``/``top_logprobs``) are not those of a given answer, so they are not
    substituted here (the API-only variant that rephrases the question and asks a judge is
    another module).

The prompt (:func:`render_prompt`, the same for every scorer)::

    Context: {context}        <- only when a context is given, followed by a blank line

    Question: {question}      <- only when a question is given
    Answer:
    {answer}

Steps cover the answer only. Local models tokenize the prompt (with the tokenizer's special
tokens, e.g. a BOS) and the answer (without) separately and concatenate the ids, so every
answer token has character offsets inside the answer string; servers tokenize the whole
text and the answer's tokens are found by walking the decoded tokens back from the end.
Offsets are normalised (:func:`normalize_spans`): in answer order, never overlapping;
a token that adds no characters of its own (a ``▁`` word prefix put before the first word,
the second byte-piece of a multi-byte character) gets an empty span ``start == end``.
``TokenStep.token`` and ``TopToken.token`` are the decoded texts of the tokens, including a
leading space where the token carries one, so both can be compared across positions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx
from pydantic import BaseModel, ConfigDict

from medverify.config import RiskSettings
from medverify.errors import ConfigError
from medverify.registry import Registry
from medverify.risk.records import TokenStep, TokenTrace, TopToken

log = logging.getLogger("medverify.risk.scorers")

NO_PROMPT_LOGPROBS = ("this endpoint returns no prompt log-probabilities; use vLLM "
                      "(prompt_logprobs) or a local model")
EMPTY_ANSWER = "empty answer: nothing to score"


class ScoreItem(BaseModel):
    """One answer to force through a model, with what it answered."""

    model_config = ConfigDict(extra="forbid")

    question: str | None = None
    answer: str
    context: str | None = None
    prompt_variant: str = "original"


@runtime_checkable
class Scorer(Protocol):
    id: str
    k: int

    async def score(self, items: Sequence[ScoreItem]) -> list[TokenTrace]: ...


def _call_scorer(factory: Callable[..., Scorer], settings: RiskSettings, spec: str) -> Scorer:
    """``SCORERS.create(prefix, settings, spec)`` calls ``factory(spec, settings)``."""
    return factory(spec, settings)


SCORERS: Registry[Scorer] = Registry("risk scorer", call=_call_scorer)
"""Scorer factories by spec prefix: ``SCORERS.create(prefix, settings, spec)`` calls
``factory(spec: str, settings: RiskSettings)``."""
SCORERS.register("hf", "medverify.risk.scorers:hf_from_spec")
for _kind in ("vllm", "openai-compatible"):
    SCORERS.register(_kind, "medverify.risk.scorers:openai_from_spec")


def make_scorer(spec: str, settings: RiskSettings | None = None) -> Scorer:
    """The scorer named by ``spec`` (``hf:PATH``, ``vllm:MODEL@URL``, ...): the spec is
    checked and its prefix picks the factory, so this is the way in, not ``SCORERS.create``."""
    text = spec.strip() if isinstance(spec, str) else ""
    prefix, sep, rest = text.partition(":")
    if not sep or not rest.strip():
        raise ConfigError(f"scorer spec {spec!r}: expected hf:/path/to/model or "
                          "vllm:MODEL@http://host:8000/v1")
    return SCORERS.create(prefix, settings or RiskSettings(), text)


def render_prompt(item: ScoreItem) -> str:
    """The text a model sees before the answer (see the module docstring)."""
    parts = []
    if item.context and item.context.strip():
        parts.append(f"Context: {item.context.strip()}\n\n")
    if item.question and item.question.strip():
        parts.append(f"Question: {item.question.strip()}\n")
    parts.append("Answer:\n")
    return "".join(parts)


def normalize_spans(steps: list[TokenStep], answer: str) -> list[TokenStep]:
    """Clip spans to the answer, empty the spans of tokens that add no characters of their
    own, and make spans follow each other without overlapping."""
    out: list[TokenStep] = []
    prev_end = 0
    for step in steps:
        start = min(max(step.start, 0), len(answer))
        end = min(max(step.end, start), len(answer))
        covered = answer[start:end]
        if step.token.strip() == "" and covered.strip() != "":
            end = start  # a prepended word marker given the offsets of the next word
        start = max(start, prev_end)
        end = max(end, start)
        out.append(step.model_copy(update={"start": start, "end": end}))
        prev_end = end
    return out


def _trace(scorer: Scorer, item: ScoreItem, *, steps: list[TokenStep] | None = None,
           error: str | None = None) -> TokenTrace:
    return TokenTrace(scorer=scorer.id, question=item.question, answer=item.answer,
                      context=item.context, k=scorer.k, steps=steps or [],
                      prompt_variant=item.prompt_variant, error=error)


class ItemError(Exception):
    """One item cannot be scored (the message goes into its trace)."""


# --------------------------------------------------------------------------- local models


def hf_from_spec(spec: str, settings: RiskSettings) -> HFScorer:
    raw = spec.partition(":")[2].strip()
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise ConfigError(f"scorer {spec!r}: model directory {path} does not exist; give a "
                          "local directory with config.json and the tokenizer files "
                          "(models are never downloaded)")
    if not (path / "config.json").is_file():
        raise ConfigError(f"scorer {spec!r}: {path} has no config.json; is it a Hugging Face "
                          "model directory?")
    return HFScorer(path.resolve(), settings)


@dataclass
class _Encoded:
    ids: list[int]
    n_prompt: int
    offsets: list[tuple[int, int]]


@dataclass
class _LocalLM:
    model: Any
    tokenizer: Any
    device: str
    max_len: int
    keep_logits: bool
    anchor: list[int]
    _texts: dict[int, str] = field(default_factory=dict)

    def text(self, token_id: int) -> str:
        """The token's text with its leading space, decoded after an anchor token (a token
        decoded alone loses a SentencePiece word-prefix space)."""
        found = self._texts.get(token_id)
        if found is None:
            decode = self.tokenizer.decode
            opts = {"skip_special_tokens": False, "clean_up_tokenization_spaces": False}
            head = decode(self.anchor, **opts)
            both = decode([*self.anchor, token_id], **opts)
            found = both[len(head):] if both.startswith(head) else decode([token_id], **opts)
            self._texts[token_id] = found
        return found

    def encode(self, item: ScoreItem) -> _Encoded:
        if not item.answer.strip():
            raise ItemError(EMPTY_ANSWER)
        prompt = self.tokenizer(render_prompt(item), add_special_tokens=True)["input_ids"]
        answer = self.tokenizer(item.answer, add_special_tokens=False,
                                return_offsets_mapping=True)
        ids = list(answer["input_ids"])
        if not ids:
            raise ItemError("the answer has no tokens for this tokenizer")
        if not prompt:
            prompt = [self.tokenizer.bos_token_id or self.tokenizer.eos_token_id or 0]
        total = len(prompt) + len(ids)
        if total > self.max_len:
            raise ItemError(f"prompt and answer are {total} tokens; the model takes at most "
                            f"{self.max_len}")
        offsets = [(int(a), int(b)) for a, b in answer["offset_mapping"]]
        return _Encoded(ids=list(prompt) + ids, n_prompt=len(prompt), offsets=offsets)


_MODELS: dict[tuple[Path, str], _LocalLM] = {}
_MODELS_LOCK = threading.Lock()


def _device(preference: str) -> str:
    import torch

    if preference == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if preference == "cuda":
        raise ConfigError("risk.device is cuda but no CUDA device is available; "
                          "use device = 'auto' or 'cpu'")
    return "cpu"


def load_local_lm(path: Path, preference: str = "auto") -> _LocalLM:
    """Load (once per path and device) a local causal LM and its tokenizer."""
    device = _device(preference)
    with _MODELS_LOCK:
        key = (path, device)
        if key not in _MODELS:
            _MODELS[key] = _load(path, device)
        return _MODELS[key]


def _load(path: Path, device: str) -> _LocalLM:
    import inspect

    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no "Loading weights" bar in every command's output
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True,
                                                     dtype=dtype)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"cannot load the model in {path}: {exc}") from exc
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(f"{path}: the tokenizer has no fast (tokenizers) version, so it "
                          "gives no character offsets")
    model.to(device).eval()
    anchor = tokenizer("a", add_special_tokens=False)["input_ids"][:1]
    return _LocalLM(model=model, tokenizer=tokenizer, device=device,
                    max_len=_max_len(model.config),
                    keep_logits="logits_to_keep" in inspect.signature(model.forward).parameters,
                    anchor=list(anchor))


def _max_len(config: Any) -> int:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return 1 << 20


class HFScorer:
    """Forced inference through a local causal LM (see the module docstring).

    Items are scored in batches of ``risk.batch_size``: left-padded, with an attention mask
    and explicit position ids, one forward pass per batch, in a worker thread."""

    def __init__(self, path: Path, settings: RiskSettings) -> None:
        self.path = path
        self.id = f"hf:{path}"
        self.k = settings.top_k
        self.batch_size = settings.batch_size
        self.device = settings.device

    def __repr__(self) -> str:
        return f"HFScorer({self.id!r}, k={self.k})"

    async def score(self, items: Sequence[ScoreItem]) -> list[TokenTrace]:
        traces: list[TokenTrace] = []
        for start in range(0, len(items), self.batch_size):
            batch = list(items[start:start + self.batch_size])
            traces.extend(await asyncio.to_thread(self.score_batch, batch))
        return traces

    def score_batch(self, items: list[ScoreItem]) -> list[TokenTrace]:
        """Score one batch synchronously (what :meth:`score` runs in a thread)."""
        lm = load_local_lm(self.path, self.device)
        traces: list[TokenTrace | None] = [None] * len(items)
        ready: list[tuple[int, _Encoded]] = []
        for i, item in enumerate(items):
            try:
                ready.append((i, lm.encode(item)))
            except ItemError as exc:
                traces[i] = _trace(self, item, error=str(exc))
        for i, steps in self._run(lm, ready, items):
            traces[i] = steps
        return [t for t in traces if t is not None]

    def _run(self, lm: _LocalLM, ready: list[tuple[int, _Encoded]],
             items: list[ScoreItem]) -> list[tuple[int, TokenTrace]]:
        if not ready:
            return []
        try:
            steps = _forward(lm, [enc for _, enc in ready], self.k)
        except Exception as exc:  # a failed batch is retried item by item
            if len(ready) == 1:
                i = ready[0][0]
                log.warning("%s: scoring failed: %s", self.id, exc)
                return [(i, _trace(self, items[i], error=f"scoring failed: {exc}"))]
            return [pair for one in ready for pair in self._run(lm, [one], items)]
        return [(i, _trace(self, items[i], steps=normalize_spans(s, items[i].answer)))
                for (i, _), s in zip(ready, steps, strict=True)]


def _forward(lm: _LocalLM, batch: list[_Encoded], k: int) -> list[list[TokenStep]]:
    import torch

    width = max(len(enc.ids) for enc in batch)
    keep = max(len(enc.ids) - enc.n_prompt for enc in batch) + 1
    pad = lm.tokenizer.pad_token_id
    pad = pad if pad is not None else (lm.tokenizer.eos_token_id or 0)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, enc in enumerate(batch):  # left padding: every answer ends at the last column
        ids[row, width - len(enc.ids):] = torch.tensor(enc.ids)
        mask[row, width - len(enc.ids):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    extra = {"logits_to_keep": keep} if lm.keep_logits else {}
    with torch.inference_mode():
        logits = lm.model(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device),
                          position_ids=positions.to(lm.device), **extra).logits[:, -keep:]
        logprobs = logits.float().log_softmax(-1)
    return [_steps(lm, logprobs[row, -(len(enc.ids) - enc.n_prompt) - 1:-1],
                   enc.ids[enc.n_prompt:], enc.offsets, k)
            for row, enc in enumerate(batch)]


def _steps(lm: _LocalLM, rows: Any, targets: list[int], offsets: list[tuple[int, int]],
           k: int) -> list[TokenStep]:
    """``rows[t]``: log-probabilities over the vocabulary predicting ``targets[t]``."""
    import torch

    target = torch.tensor(targets, device=rows.device)
    chosen = rows.gather(1, target[:, None])
    ranks = (rows > chosen).sum(-1) + 1
    top_lp, top_ids = rows.topk(min(k, rows.shape[-1]), dim=-1)
    chosen_l, ranks_l = chosen[:, 0].tolist(), ranks.tolist()
    top_lp_l, top_ids_l = top_lp.tolist(), top_ids.tolist()
    return [TokenStep(token=lm.text(tid), start=start, end=end, logprob=chosen_l[t],
                      rank=ranks_l[t],
                      top=[TopToken(token=lm.text(i), logprob=lp)
                           for i, lp in zip(top_ids_l[t], top_lp_l[t], strict=True)])
            for t, (tid, (start, end)) in enumerate(zip(targets, offsets, strict=True))]


# --------------------------------------------------------------------- vLLM-style servers


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
        max_retries=3 if parsed.max_retries is None else parsed.max_retries)


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
                 max_retries: int = 3, backoff_s: float = 0.5) -> None:
        self.model = model
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
                response = await client.post(self.url, json=body)
            except httpx.TransportError as exc:  # timeouts included
                problem, wait = f"cannot reach {self.url}: {type(exc).__name__}", None
            else:
                if response.status_code < 400:
                    return _json(response, self.url)
                problem, wait = self._http_problem(response)
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
