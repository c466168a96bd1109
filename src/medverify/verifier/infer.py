"""Inference engine: batched, length-sorted, windowed 3-way probabilities for claim/evidence pairs.

Long evidence is split into windows (:mod:`medverify.verifier.windows`) and every window is
scored. A pair's probabilities are those of its *deciding window*: the window with the highest
``max(P(SUPPORTED), P(CONTRADICTED))``, i.e. the most decisive passage wins, and a pair is
NOT_ENOUGH_INFO only when no window supports or contradicts the claim.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medverify.bf16 import amx_available
from medverify.errors import ConfigError
from medverify.verdict_rules import passage_label
from medverify.verifier import onnx_int8
from medverify.verifier.model import LABELS, CrossEncoder, load_model, load_tokenizer
from medverify.verifier.quantized import Bf16Encoder, Int8Encoder, score_windows_fixed
from medverify.verifier.windows import MAX_CLAIM_TOKENS, make_windows

DEFAULT_WEIGHTS = Path(__file__).resolve().parent / "weights"
DEFAULT_THRESHOLDS = {"support": 0.5, "contradict": 0.5}


def quantize_model(model: CrossEncoder) -> torch.nn.Module:
    """Dynamic int8 quantisation of the Linear layers (CPU inference)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


def encode_pairs(tokenizer: Any, pairs: Sequence[tuple[str, str]], max_tokens: int) -> dict:
    """Tokenise (claim, window) pairs with the claim capped and the window truncated to fit."""
    claims = [
        tokenizer.convert_tokens_to_string(tokenizer.tokenize(c)[:MAX_CLAIM_TOKENS])
        for c, _ in pairs
    ]
    return tokenizer(
        claims,
        [w for _, w in pairs],
        truncation="only_second",
        max_length=max_tokens,
        padding=True,
        return_tensors="pt",
    )


def score_windows(
    model: torch.nn.Module,
    tokenizer: Any,
    pairs: Sequence[tuple[str, str]],
    max_tokens: int,
    batch_size: int = 32,
) -> np.ndarray:
    """(n, 3) float32 softmax probabilities for already-windowed pairs, batched by length."""
    out = np.zeros((len(pairs), len(LABELS)), dtype=np.float32)
    if not pairs:
        return out
    lengths = [len(c) + len(w) for c, w in pairs]
    order = np.argsort(lengths, kind="stable")
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = encode_pairs(tokenizer, [pairs[i] for i in idx], max_tokens)
            logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            out[idx] = torch.softmax(logits.float(), dim=-1).numpy()
    return out


def aggregate(window_probs: np.ndarray) -> np.ndarray:
    """The probabilities of the deciding window: highest max(P(S), P(C))."""
    decisive = window_probs[:, :2].max(axis=1)
    return window_probs[int(np.argmax(decisive))]


_M_ARENA_MAX = -8  # glibc's mallopt parameter number


def one_malloc_arena() -> bool:
    """Ask glibc for a single malloc arena (``mallopt(M_ARENA_MAX, 1)``), once per process.

    Scoring windows one at a time from worker threads (the judge runs the verifier off the
    event loop) made every thread's arena grow and the same work slower with each call (seen
    in exploratory timings); with one arena it ran at the main thread's speed. False where
    there is no glibc (other platforms keep their allocator's default)."""
    global _ARENA_SET
    if _ARENA_SET is None:
        try:
            _ARENA_SET = bool(ctypes.CDLL("libc.so.6").mallopt(_M_ARENA_MAX, 1))
        except (OSError, AttributeError):
            _ARENA_SET = False
    return _ARENA_SET


_ARENA_SET: bool | None = None

# Intra-op threads while a per-window model scores a short window (issue 45). A short
# window's forward pass is hundreds of small operations; with two threads each one waits
# for the other thread, and on a busy machine that thread is often not running: with the
# load average at 3.6-6 on 2 cores, HealthVer's short windows ran at 94 windows/s on one
# thread and 12 on two (benchmarks/results/verifier_modes.md). Long windows (abstracts) gain
# from torch's threads (bench_verifier_threads_eval.py), so windows over SHORT_WINDOW_CHARS
# characters (claim + window, about 130 word pieces) keep them. The scores do not depend on
# the thread count (bench_verifier_batch_dependence.py compares them). The batched
# "window_scales" scoring (issue 45) runs every window on these threads too: on the busy
# 2-core machine two threads crawled (a tiny model's 11 windows: 2.5 s on two, 0.03 on one).
PER_WINDOW_THREADS = 1
SHORT_WINDOW_CHARS = 600
# Batches scored side by side ("window_scales", each worker on PER_WINDOW_THREADS): on the
# quiet 2-core machine (load 1.4) 100 HealthVer pairs ran at 195-202 pairs/s on two workers,
# 120-127 on one, 179-189 on torch's two intra-op threads; Check-COVID 35-36 vs 20 vs 31-33
# (exploratory run, issue 45). On the overloaded machine (load 11) two workers were no faster.
WINDOW_WORKERS = 2

# How windows are scored (``Verifier.scoring``): "auto" picks, for the int8 model,
# "onnx_int8" (ONNX Runtime's dynamic int8 with per-channel weights, one window a run,
# :mod:`medverify.verifier.onnx_int8`) where ONNX Runtime is installed, else
# "window_scales" (torch's int8 with per-window scales in fixed-shape batches); "batched"
# for a float model (``quantize=False``). Both int8 modes are batch-independent, and each
# has its own shipped calibration (judge/calibration*.json, matched by ``scores_id``):
# "onnx_int8" moved 15 % of the dev sets' labels against "window_scales"
# (benchmarks/results/verifier_onnx_int8_vs_window_scales.md). "bf16" (packed bfloat16 on
# AMX, :class:`~medverify.verifier.quantized.Bf16Encoder`) is opt-in through the
# environment variable and has no calibration yet, so its verdicts carry no confidence.
SCORING_ENV = "MEDVERIFY_VERIFIER_SCORING"
SCORINGS = ("auto", "bf16", "onnx_int8", "window_scales", "per_window", "batched")
SCORES_SUFFIX = {"bf16": "+bf16", "onnx_int8": "+onnx-int8"}  # scores_id per arithmetic


def resolve_scoring(requested: str, *, int8: bool, bf16: bool, onnx: bool = False) -> str:
    """The scoring mode ``requested`` stands for, given the encoders that exist (int8: a
    quantised model; bf16: a float model on a CPU with AMX; onnx: a float model on the CPU
    with ONNX Runtime installed); ConfigError if impossible."""
    if requested not in SCORINGS:
        raise ConfigError(f"unknown verifier scoring {requested!r} ({SCORING_ENV}); "
                          f"choose one of {', '.join(SCORINGS)}")
    if requested == "auto":  # the int8 model: ONNX Runtime's int8 where installed
        return ("onnx_int8" if onnx else "window_scales") if int8 else "batched"
    needs = {"bf16": (bf16, "a CPU with AMX bfloat16 and a float model"),
             "onnx_int8": (onnx, "ONNX Runtime (pip install 'medverify[onnx]') and the "
                                 "float weights on the CPU, with their sha256"),
             "window_scales": (int8, "an int8 model (quantize=True on the CPU)"),
             "per_window": (True, ""), "batched": (True, "")}
    have, what = needs[requested]
    if not have:
        raise ConfigError(f"verifier scoring {requested!r} needs {what}; use 'auto'")
    return requested


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` intra-op threads (None: leave them), then restore.

    ``torch.set_num_threads`` is process-wide for some backends: another thread running
    torch meanwhile also gets ``threads`` (its speed, never its results)."""
    previous = torch.get_num_threads()
    if threads is None or threads == previous:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def thresholds_for(metadata: dict[str, Any], scoring: str) -> dict[str, float]:
    """The support/contradict thresholds the weights record for ``scoring``
    (``thresholds_by_scoring``, written by :func:`medverify.verifier.train.calibrate_scoring`),
    else their shipped ``thresholds`` (fitted on torch's int8), else 0.5 / 0.5."""
    fitted = metadata.get("thresholds_by_scoring", {}).get(scoring)
    chosen = fitted or metadata.get("thresholds", DEFAULT_THRESHOLDS)
    return {"support": float(chosen["support"]), "contradict": float(chosen["contradict"])}


def _is_quantized(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds dynamically quantised Linear layers."""
    return any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules())


class Verifier:
    """The built-in claim verifier (load with :meth:`load` or :func:`get_verifier`)."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, metadata: dict[str, Any], *,
                 float_model: torch.nn.Module | None = None, scoring: str | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.metadata = metadata
        self.max_tokens: int = int(metadata.get("max_tokens", 256))
        short = str(metadata.get("weights_sha256", ""))[:8]
        # The weights' identity (what the judge's calibration is tied to); the arithmetic
        # that scored a run is ``scoring`` (see :attr:`provenance`).
        self.id: str = f"{metadata.get('name', 'medverify-verifier-v1')}+{short}"
        # A dynamically quantised model scales activations per batch tensor, so a window's
        # probabilities depend on what it is batched with (up to 0.46 apart, 15-18 % of
        # one-passage labels changed: benchmarks/bench_verifier_batch_dependence.py). The
        # batch-independent modes score windows in fixed-shape batches
        # (:mod:`medverify.verifier.quantized`, issue 45): "bf16" (packed bfloat16 on AMX,
        # from the float weights) or "window_scales" (int8, one activation scale per
        # window), or one window a run ("onnx_int8", ONNX Runtime); "auto" picks
        # (:data:`SCORING_ENV` forces one). "per_window" (one window per pass, issue 27)
        # and "batched" (torch's dynamic int8 in batches, before issue 27; the only batched
        # mode of a float model without AMX) remain for comparisons.
        self.int8: Int8Encoder | None = Int8Encoder(model) if _is_quantized(model) else None
        source = float_model if float_model is not None else (
            None if self.int8 is not None else model)
        cpu = source is not None and all(p.device.type == "cpu" for p in source.parameters())
        self.scoring: str = resolve_scoring(scoring or os.environ.get(SCORING_ENV) or "auto",
                                            int8=self.int8 is not None,
                                            bf16=cpu and amx_available(),
                                            onnx=cpu and bool(metadata.get("weights_sha256"))
                                            and onnx_int8.onnx_available())
        # The decision thresholds fitted for this arithmetic's scores where the weights
        # record them (``medverify train thresholds``), else the shipped int8 ones.
        self.thresholds: dict[str, float] = thresholds_for(metadata, self.scoring)
        self.bf16: Bf16Encoder | None = (Bf16Encoder(source) if self.scoring == "bf16"
                                         and source is not None else None)
        self.onnx: onnx_int8.OnnxInt8Encoder | None = (
            onnx_int8.load_encoder(source, str(metadata.get("weights_sha256", "")))
            if self.scoring == "onnx_int8" and source is not None else None)
        # Intra-op threads while scoring short windows one at a time, or any windows in
        # fixed-shape batches (None: torch's).
        self.threads: int | None = PER_WINDOW_THREADS
        # Threads scoring batches side by side in "bf16" and "window_scales" (each on
        # ``threads`` intra-op threads); the scores are the same with any number.
        self.workers: int = WINDOW_WORKERS

    @property
    def scores_id(self) -> str:
        """The identity of this verifier's scores, what a calibration is fitted for: the
        weights' id, plus the arithmetic where it is not torch's int8 (``+bf16``,
        ``+onnx-int8``: :data:`SCORES_SUFFIX`)."""
        return self.id + SCORES_SUFFIX.get(self.scoring, "")

    @property
    def provenance(self) -> dict[str, str]:
        """What produced this verifier's scores: the weights and the arithmetic
        ("bf16", "window_scales", ...): bf16 and int8 disagree on about 15 % of labels."""
        return {"verifier": self.id, "scoring": self.scoring}

    def _score(self, pairs: Sequence[tuple[str, str]], batch_size: int) -> np.ndarray:
        """Probabilities of already-windowed pairs in the verifier's scoring mode."""
        if self.scoring == "onnx_int8":
            if self.onnx is None:
                raise ConfigError("verifier scoring 'onnx_int8' is not available here")
            return self.onnx.score(self.tokenizer, pairs, self.max_tokens, self.workers)
        fixed = {"bf16": self.bf16, "window_scales": self.int8}
        if self.scoring in fixed:
            encoder = fixed[self.scoring]
            if encoder is None:
                raise ConfigError(f"verifier scoring {self.scoring!r} is not available here")
            with torch_threads(self.threads):
                return score_windows_fixed(encoder, self.tokenizer, pairs, self.max_tokens,
                                           batch_size, self.workers)
        if self.scoring != "per_window":
            return score_windows(self.model, self.tokenizer, pairs, self.max_tokens, batch_size)
        out = np.zeros((len(pairs), len(LABELS)), dtype=np.float32)
        short = [len(c) + len(w) <= SHORT_WINDOW_CHARS for c, w in pairs]
        for wanted, threads in ((True, self.threads), (False, None)):
            idx = [i for i, s in enumerate(short) if s is wanted]
            if idx:
                with torch_threads(threads):
                    out[idx] = score_windows(self.model, self.tokenizer,
                                             [pairs[i] for i in idx], self.max_tokens, 1)
        return out

    @classmethod
    def load(
        cls, path: str | Path | None = None, *, device: str = "cpu", quantize: bool = True,
        scoring: str | None = None,
    ) -> Verifier:
        """Load weights from ``path`` (default: the shipped weights) onto ``device``.

        On the CPU the int8 model is made from the float one (a copy); the float weights
        feed the bfloat16 encoder or the int8 ONNX export only when ``scoring`` (default:
        :data:`SCORING_ENV`, else "auto") is "bf16" or "onnx_int8", and are dropped
        otherwise."""
        if device != "cpu":
            model, meta = load_model(path or DEFAULT_WEIGHTS)
            return cls(model.to(device).eval(), load_tokenizer(), meta, scoring=scoring)
        one_malloc_arena()
        model, meta = load_model(path or DEFAULT_WEIGHTS)
        if not quantize:
            return cls(model.eval(), load_tokenizer(), meta, scoring=scoring)
        return cls(quantize_model(model).eval(), load_tokenizer(), meta,
                   float_model=model.eval(), scoring=scoring)

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        """(n, 3) float32 probabilities in LABELS order; windows aggregated per pair."""
        flat: list[tuple[str, str]] = []
        owner: list[int] = []
        for i, (claim, evidence) in enumerate(pairs):
            for window in make_windows(self.tokenizer, claim, evidence, self.max_tokens):
                flat.append((claim, window))
                owner.append(i)
        probs = self._score(flat, batch_size)
        owners = np.asarray(owner)
        out = np.zeros((len(pairs), len(LABELS)), dtype=np.float32)
        for i in range(len(pairs)):
            out[i] = aggregate(probs[owners == i])
        return out

    def predict_windows(self, claim: str, evidence: str) -> list[tuple[str, np.ndarray]]:
        """(window text, probabilities) for every window of ``evidence``."""
        windows = make_windows(self.tokenizer, claim, evidence, self.max_tokens)
        probs = self._score([(claim, w) for w in windows], 32)
        return list(zip(windows, probs, strict=True))

    def label_pairs(self, probs: np.ndarray) -> list[str]:
        """3-way labels from probabilities with the calibrated thresholds."""
        return label_pairs(probs, self.thresholds)


def label_pairs(probs: np.ndarray, thresholds: dict[str, float]) -> list[str]:
    """3-way labels with the built-in judge's rule for one passage.

    s = P(S) >= t_s, c = P(C) >= t_c: SUPPORTED if only s, CONTRADICTED if only c, the larger
    of P(S) and P(C) if both (ties to SUPPORTED), NOT_ENOUGH_INFO if neither
    (:func:`medverify.verdict_rules.passage_label`, which the judge applies per passage).
    """
    pair = (thresholds["support"], thresholds["contradict"])
    labels = []
    for row in np.asarray(probs, dtype=np.float64):
        label = passage_label(row, pair)
        labels.append(LABELS[2] if label is None else LABELS[label])
    return labels


_CACHE: dict[str, Verifier] = {}
_LOCK = threading.Lock()


def get_verifier(path: str | Path | None = None) -> Verifier:
    """Process-wide cached :class:`Verifier` (loaded once per process and path)."""
    key = str(Path(path or DEFAULT_WEIGHTS).resolve())
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = Verifier.load(key)
        return _CACHE[key]
