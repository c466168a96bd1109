"""Log-probability scorers: force an answer through a language model, token by token.

One seam, :class:`Scorer`: ``await scorer.score(items)`` gives one :class:`TokenTrace` per
:class:`ScoreItem`, in order. A failure for one item is a trace with ``error`` set, never an
exception (configuration problems, e.g. a missing model directory or API key, do raise
:class:`~medverify.errors.ConfigError`). Scorers are made from spec strings with
:func:`make_scorer` (factories in :data:`SCORERS`, by spec prefix; the local models are
here, the servers in :mod:`medverify.risk.server_scorer`):

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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

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


class ScorerRegistry(Registry[Scorer]):
    """Risk scorer factories by spec prefix, each called as ``factory(spec, settings)``."""

    def create(self, prefix: str, spec: str, settings: RiskSettings) -> Scorer:
        """The scorer for ``spec`` (whose prefix is ``prefix``) with ``settings``."""
        return self.build(prefix, spec, settings)


SCORERS = ScorerRegistry("risk scorer")
"""Scorer factories by spec prefix: ``SCORERS.create(prefix, spec, settings)``."""
SCORERS.register("hf", "medverify.risk.scorers:hf_from_spec")
for _kind in ("vllm", "openai-compatible"):
    SCORERS.register(_kind, "medverify.risk.server_scorer:openai_from_spec")


def make_scorer(spec: str, settings: RiskSettings | None = None) -> Scorer:
    """The scorer named by ``spec`` (``hf:PATH``, ``vllm:MODEL@URL``, ...): the spec is
    checked and its prefix picks the factory, so this is the way in, not ``SCORERS.create``."""
    text = spec.strip() if isinstance(spec, str) else ""
    prefix, sep, rest = text.partition(":")
    if not sep or not rest.strip():
        raise ConfigError(f"scorer spec {spec!r}: expected hf:/path/to/model or "
                          "vllm:MODEL@http://host:8000/v1")
    return SCORERS.create(prefix, text, settings or RiskSettings())


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
    """``hf:DIR`` (a local model directory) or ``hf:NAME`` (a catalogue model prepared with
    ``medverify models prepare NAME``, :mod:`medverify.llm.local_models`)."""
    from medverify.llm.local_models import CATALOGUE, resolve_model_dir

    raw = spec.partition(":")[2].strip()
    path = Path(raw).expanduser()
    if raw in CATALOGUE and not path.is_dir():
        # a clear error says how to prepare it; the id is the catalogue name (its GGUF's
        # sha256 is pinned), so a classifier trained with it works on any machine
        return HFScorer(resolve_model_dir(raw).resolve(), settings, name=raw)
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


_MODELS: dict[tuple[Path, str, str], _LocalLM] = {}
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


def resolve_dtype(dtype: str, preference: str = "auto") -> str:
    """``[risk] dtype`` as a torch dtype name: ``auto`` is bfloat16 on CUDA, float32 on CPU."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if _device(preference) == "cuda" else "float32"


def load_local_lm(path: Path, preference: str = "auto", dtype: str = "auto") -> _LocalLM:
    """Load (once per path, device and dtype) a local causal LM and its tokenizer."""
    device = _device(preference)
    dtype = resolve_dtype(dtype, device)
    with _MODELS_LOCK:
        key = (path, device, dtype)
        if key not in _MODELS:
            _MODELS[key] = _load(path, device, dtype)
        return _MODELS[key]


def _load(path: Path, device: str, dtype_name: str = "float32") -> _LocalLM:
    import inspect

    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no "Loading weights" bar in every command's output
    dtype = getattr(torch, dtype_name)
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

    def __init__(self, path: Path, settings: RiskSettings, name: str | None = None) -> None:
        self.path = path
        self.id = f"hf:{name or path}"
        self.k = settings.top_k
        self.batch_size = settings.batch_size
        self.device = settings.device
        self.dtype = settings.dtype

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
        lm = load_local_lm(self.path, self.device, self.dtype)
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
