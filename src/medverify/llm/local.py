"""The in-process chat provider: ``local:NAME`` runs a prepared model with transformers.

``--model local:qwen2.5-1.5b`` needs no server: the model prepared by ``medverify models
prepare qwen2.5-1.5b`` (:mod:`medverify.llm.local_models`) is loaded once per process
(CUDA when present, else the CPU; bfloat16 where the hardware computes it natively, else
float32) and answers one request at a time. ``local:/path/to/dir`` runs any causal-LM
directory with a chat template (the tests use a tiny random one).

What it does beyond plain greedy decoding:

- **prefix reuse**: the key/value cache of the previous request is kept, and a request that
  starts with the same tokens (the same passage and claim, another question; the two passes
  of the scored judge) computes only what differs;
- **log-probabilities**: ``top_logprobs`` gives, at each generated position, the most
  likely tokens from the full softmax (what OpenAI-compatible servers return), which the
  scored judge reads its option probabilities from;
- **JSON mode**: the first reply token must open an object (tokens such as ``{"`` count:
  forcing a lone ``{`` into the prompt instead pushed the 0.5B model off its usual
  ``{"`` token into unquoted keys), and generation stops when the object closes, so a small
  model cannot wander into prose before or after its JSON;
- limits: a prompt longer than ``max_prompt_tokens`` is refused (not truncated) with a
  non-retryable ProviderError, and ``max_tokens`` caps the reply (default 512).

The same files can be served by llama.cpp (``llama-server -m FILE.gguf``) or vLLM and used
as ``llamacpp:NAME@http://host:8080/v1`` (docs/judges.md).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medverify.config import ModelSettings
from medverify.errors import MissingDependencyError, ProviderError
from medverify.llm.base import ChatRequest, Completion, TokenCount, TokenLogprobs, TopLogprob
from medverify.llm.local_models import RECORD_FILE, resolve_model_dir
from medverify.llm.spec import ModelSpec

DEFAULT_MAX_TOKENS = 512
MAX_PROMPT_TOKENS = 8192  # longer prompts are refused: CPU time grows with the square


def from_spec(spec: ModelSpec, settings: ModelSettings) -> LocalChatProvider:
    """The registry factory for ``local:NAME``."""
    return LocalChatProvider(spec.model)


class LocalChatProvider:
    """A prepared local model as a :class:`~medverify.llm.base.Provider`."""

    serial = True  # answers one request at a time: callers keep related requests together
    default_timeout_s = 900.0  # CPU generation is slow; the spec's ?timeout= overrides it

    def __init__(self, name: str, *, max_prompt_tokens: int = MAX_PROMPT_TOKENS) -> None:
        self.name = name
        self.path = resolve_model_dir(name)
        self.max_prompt_tokens = max_prompt_tokens
        self.id = f"local:{name}#{_fingerprint(self.path)}"

    async def complete(self, request: ChatRequest) -> Completion:
        runner = await asyncio.to_thread(load_runner, self.path)
        started = time.perf_counter()
        cancel = threading.Event()
        try:
            completion = await asyncio.to_thread(runner.chat, request, self.max_prompt_tokens,
                                                 cancel)
        except asyncio.CancelledError:  # a timeout: stop generating at the next token
            cancel.set()
            raise
        completion.latency_s = time.perf_counter() - started
        return completion

    async def aclose(self) -> None:
        """Nothing to close: the loaded model stays for the process (see load_runner)."""


def _fingerprint(path: Path) -> str:
    """What identifies the weights in cache keys: the prepared GGUF's sha256, else the
    config's modification time and size (a test model rebuilt in place changes key)."""
    record = path / RECORD_FILE
    if record.is_file():
        import json

        try:
            return str(json.loads(record.read_text("utf-8"))["gguf_sha256"])[:12]
        except (ValueError, KeyError, TypeError):
            pass
    stat = (path / "config.json").stat()
    return f"{stat.st_size:x}{int(stat.st_mtime):x}"


_RUNNERS: dict[Path, Runner] = {}
_RUNNERS_LOCK = threading.Lock()


def load_runner(path: Path) -> Runner:
    """The process's runner for ``path`` (loaded on first use, then kept)."""
    with _RUNNERS_LOCK:
        runner = _RUNNERS.get(path)
        if runner is None:
            runner = _RUNNERS[path] = Runner.load(path)
        return runner


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AMX or AVX-512 BF16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text("utf-8", "replace")
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


@dataclass
class _Prefix:
    """The tokens whose key/value cache is kept, and the cache."""

    ids: list[int] = field(default_factory=list)
    past: Any = None


class Runner:
    """One loaded model and tokenizer; ``chat`` answers one request at a time."""

    def __init__(self, model: Any, tokenizer: Any, device: str) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.lock = threading.Lock()
        self.prefix = _Prefix()
        self.stop_ids = _stop_ids(model, tokenizer)
        # transformers 5.x renamed ``past_key_values`` to ``cache``
        params = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"

    @classmethod
    def load(cls, path: Path) -> Runner:
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise MissingDependencyError(exc.name or "transformers", "local") from exc
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        device = "cuda" if torch.cuda.is_available() else "cpu"
        wanted = os.environ.get("MEDVERIFY_LOCAL_DTYPE") or (
            "bfloat16" if device == "cuda" or cpu_has_bf16() else "float32")
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        if not getattr(tokenizer, "chat_template", None):
            raise ProviderError(f"{path}: the tokenizer has no chat template", retryable=False)
        model = AutoModelForCausalLM.from_pretrained(
            str(path), local_files_only=True, dtype=getattr(torch, wanted)).to(device).eval()
        return cls(model, tokenizer, device)

    def chat(self, request: ChatRequest, max_prompt_tokens: int,
             cancel: threading.Event | None = None) -> Completion:
        ids = self.prompt_ids(request)
        if len(ids) > max_prompt_tokens:
            raise ProviderError(f"prompt of {len(ids)} tokens is longer than this local "
                                f"model's limit of {max_prompt_tokens}", retryable=False)
        with self.lock:
            if cancel is not None and cancel.is_set():
                raise ProviderError("cancelled before it started", retryable=False)
            try:
                tokens, logprobs, reason = self._generate(ids, request, cancel)
            except RuntimeError as exc:  # e.g. out of memory
                self.prefix = _Prefix()
                raise ProviderError(f"local model failed: {exc}", retryable=False) from exc
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return Completion(
            text=text, model=request.model, finish_reason=reason, logprobs=logprobs,
            usage=TokenCount(prompt_tokens=len(ids), completion_tokens=len(tokens)))

    def prompt_ids(self, request: ChatRequest) -> list[int]:
        """The chat-templated prompt, as token ids."""
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                  tokenize=False)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def json_openers(self, size: int) -> Any:
        """A mask over the vocabulary of the tokens that open a JSON object (their text,
        leading spaces aside, starts with ``{``); computed once."""
        import torch

        if getattr(self, "_openers", None) is None or self._openers.shape[0] != size:
            texts = self.tokenizer.batch_decode([[i] for i in range(size)])
            self._openers = torch.tensor([t.lstrip().startswith("{") for t in texts],
                                         device=self.device)
        return self._openers

    def _generate(self, ids: list[int], request: ChatRequest,
                  cancel: threading.Event | None = None
                  ) -> tuple[list[int], list[TokenLogprobs] | None, str]:
        import torch

        limit = request.max_tokens or DEFAULT_MAX_TOKENS
        want = request.top_logprobs
        sampler = _Sampler(request.temperature, request.seed)
        depth = _JsonDepth(0) if request.json_mode else None
        tokens: list[int] = []
        logprobs: list[TokenLogprobs] | None = [] if want is not None else None
        with torch.inference_mode():
            logits = self._forward(ids)
            for _ in range(limit):
                if cancel is not None and cancel.is_set():
                    return tokens, logprobs, "cancelled"
                log_p = torch.log_softmax(logits.float(), dim=-1)
                if depth is not None and not tokens:  # the reply must open an object
                    opens = self.json_openers(log_p.shape[-1])
                    log_p = torch.log_softmax(log_p.masked_fill(~opens, float("-inf")), -1)
                token = sampler.pick(log_p)
                if token in self.stop_ids:
                    return tokens, logprobs, "stop"
                if logprobs is not None:
                    logprobs.append(self._logprobs(log_p, token, want or 0))
                tokens.append(token)
                if depth is not None and depth.feed(self.tokenizer.decode([token])):
                    return tokens, logprobs, "stop"
                logits = self._forward([*ids, *tokens])
        return tokens, logprobs, "length"

    def _forward(self, ids: list[int]) -> Any:
        """Next-token logits after ``ids``, reusing the kept cache for the common prefix."""
        import torch

        common = _common_prefix(self.prefix.ids, ids)
        common = min(common, len(ids) - 1)  # at least one new token gives the logits
        past = self.prefix.past
        if past is None or common == 0:
            past, common = None, 0
        elif common < len(self.prefix.ids):
            past.crop(common - len(self.prefix.ids))  # negative: tokens to drop
        new = torch.tensor([ids[common:]], device=self.device)
        out = self.model(input_ids=new, use_cache=True, **{self.cache_arg: past})
        kept = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        self.prefix = _Prefix(ids=list(ids), past=kept)
        return out.logits[0, -1]

    def _logprobs(self, log_p: Any, token: int, top: int) -> TokenLogprobs:
        import torch

        k = min(max(top, 1), log_p.shape[-1])
        values, indices = torch.topk(log_p, k)
        alternatives = [TopLogprob(token=self.tokenizer.decode([int(i)]), logprob=float(v))
                        for v, i in zip(values.tolist(), indices.tolist(), strict=True)]
        return TokenLogprobs(token=self.tokenizer.decode([token]),
                             logprob=float(log_p[token]), top=alternatives[:top])


def _stop_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model.generation_config, "eos_token_id", None),
                   tokenizer.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, list):
            ids.update(i for i in source if isinstance(i, int))
    for name in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
        token = tokenizer.convert_tokens_to_ids(name)
        if isinstance(token, int) and token != tokenizer.unk_token_id and token >= 0:
            ids.add(token)
    return ids


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class _Sampler:
    """Greedy at temperature 0, else seeded sampling."""

    def __init__(self, temperature: float, seed: int | None) -> None:
        self.temperature = temperature
        self.generator: Any = None
        if temperature > 0:
            import torch

            self.generator = torch.Generator().manual_seed(seed if seed is not None else 0)

    def pick(self, log_p: Any) -> int:
        import torch

        if self.temperature <= 0:
            return int(torch.argmax(log_p))
        probs = torch.softmax(log_p / self.temperature, dim=-1).cpu()
        return int(torch.multinomial(probs, 1, generator=self.generator))


class _JsonDepth:
    """Tracks brace depth outside JSON strings; ``feed`` says when the outer object closed."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.opened = depth > 0
        self.in_string = False
        self.escaped = False

    def feed(self, text: str) -> bool:
        for char in text:
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif char == "\\":
                    self.escaped = True
                elif char == '"':
                    self.in_string = False
            elif char == '"':
                self.in_string = True
            elif char == "{":
                self.depth += 1
                self.opened = True
            elif char == "}":
                self.depth -= 1
                if self.depth <= 0 and self.opened:
                    return True
        return False
