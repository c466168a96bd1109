"""The sentence-transformers embedder (:class:`SentenceTransformerEmbedder`): a local model
directory loaded once per process (fp32, fp16 on CUDA, or int8 dynamically quantised on the
CPU), texts tokenised once into token windows, run in batches of similar length through
torch or ONNX Runtime (queries, under ``embed_runtime = "auto"``: bfloat16 on AMX CPUs,
else ONNX Runtime fp32 where installed, else torch; :meth:`SentenceTransformerEmbedder.
query_runtime`; made on the first query, so an ingest never loads it); and how the device
and precision are chosen (:func:`resolve_device`, :func:`resolve_precision`).

Built by name through :func:`medverify.kb.embed.get_embedder` (``all-MiniLM-L6-v2``, or a
model directory's path).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np

from medverify.errors import ConfigError, KBError
from medverify.kb.embed_base import normalize, split_windows

log = logging.getLogger(__name__)


class HFTokenizer:
    """Offsets from a HF ``tokenizers`` tokenizer (no special tokens, no truncation)."""

    def __init__(self, tokenizer_json: Path) -> None:
        from tokenizers import Tokenizer as _HFTokenizer

        self._tok = _HFTokenizer.from_file(str(tokenizer_json))
        self._tok.no_truncation()
        self._tok.no_padding()

    def offsets(self, text: str) -> list[tuple[int, int]]:
        encoding = self._tok.encode(text, add_special_tokens=False)
        return [(s, e) for s, e in encoding.offsets if e > s]

    @functools.cached_property
    def _specials(self) -> tuple[list[int], list[int]]:
        """The ids the post-processor puts before and after a text (BERT: [CLS], [SEP])."""
        bare = self._tok.encode("a", add_special_tokens=False).ids
        full = self._tok.encode("a", add_special_tokens=True).ids
        at = next(i for i in range(len(full)) if full[i:i + len(bare)] == bare)
        return full[:at], full[at + len(bare):]

    def windows(self, texts: list[str], window: int) -> tuple[list[list[int]], list[int]]:
        """Token-id windows of the texts (each with the special tokens around it) and the
        index of the text each belongs to, tokenising every text once (one batch call).
        A text is cut into the fewest equal windows of at most ``window`` tokens, exactly
        where :func:`split_windows` cuts its text."""
        head, tail = self._specials
        out: list[list[int]] = []
        owners: list[int] = []
        for index, encoding in enumerate(self._tok.encode_batch(texts,
                                                                add_special_tokens=False)):
            ids = [i for i, (s, e) in zip(encoding.ids, encoding.offsets, strict=True)
                   if e > s]
            count = max(1, -(-len(ids) // window))
            size = max(1, -(-len(ids) // count))
            for start in range(0, max(len(ids), 1), size):
                out.append(head + ids[start:start + size] + tail)
                owners.append(index)
        return out, owners


Precision = Literal["auto", "fp32", "int8"]
Device = Literal["auto", "cpu", "cuda"]
# what runs a model embedder's forward pass (CPU fp32); auto: torch, and queries in
# bfloat16 on AMX CPUs (:func:`query_encoder`), else on ONNX Runtime fp32 where installed
Runtime = Literal["auto", "torch", "onnx"]
RUNTIMES = ("auto", "torch", "onnx")
PRECISIONS = ("fp32", "int8")  # what a KB records (``embed_precision`` in its meta)


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (False when torch cannot tell)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # a broken CUDA install is "no GPU"
        return False


def resolve_device(device: str = "auto", precision: str = "auto") -> str:
    """``cuda`` when asked for, or on ``auto`` when a GPU is there and the precision runs
    on it (int8 dynamic quantisation is CPU-only); else ``cpu``."""
    if device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"unknown embedding device {device!r}: use auto, cpu or cuda")
    if device == "cuda":
        if precision == "int8":
            raise ConfigError("int8 embedding runs on the CPU only: use embed_device = "
                              "\"cpu\" (or auto), or embed_precision = \"fp32\"")
        if not cuda_available():
            raise ConfigError("embed_device = \"cuda\" but torch sees no CUDA device")
        return "cuda"
    if device == "auto" and precision != "int8" and cuda_available():
        return "cuda"
    return "cpu"


AUTO_PRECISION = "fp32"  # what ``auto`` picks on the CPU (see resolve_precision)


def resolve_precision(precision: str = "auto", device: str = "auto") -> str:
    """The precision class of the vectors. ``auto`` is fp32: on a GPU it is computed in
    fp16 (same weights, vectors within ~1e-3: the fp32 class); on the CPU int8 is 2-3x
    faster but lost 0.014 recall@5 on Check-COVID dev (within 0.01 on train), more than
    the 0.01 allowed to make it the default (benchmarks/results/ingest_speed.md), so it
    is opt-in (``embed_precision = "int8"``)."""
    if precision not in ("auto", *PRECISIONS):
        raise ConfigError(f"unknown embedding precision {precision!r}: use auto, fp32 or "
                          "int8")
    if precision != "auto":
        return precision
    if device == "cuda" or (device == "auto" and cuda_available()):
        return "fp32"
    return AUTO_PRECISION


class SentenceTransformerEmbedder:
    """A local sentence-transformers model, loaded once per process.

    Texts longer than the model's window (``max_seq_length`` minus the two special
    tokens) are split into consecutive token windows; each window is embedded and the
    text's vector is the re-normalised mean of the normalised window vectors. See
    docs/kb.md for why (measured against truncation).

    ``precision`` is ``fp32`` (the model as published; computed in fp16 on CUDA) or
    ``int8`` (dynamic int8 quantisation of the Linear layers, CPU only); ``auto`` is fp32
    (:func:`resolve_precision`). ``device`` is ``auto``
    (CUDA when present), ``cpu`` or ``cuda``. Texts are tokenised once (a batch call of
    the fast tokenizer), cut into windows of token ids and run through the model in
    batches of similar length, so little of a batch is padding.
    """

    def __init__(self, path: str | Path, name: str | None = None, batch_size: int = 64,
                 long_text: Literal["mean", "truncate"] = "mean",
                 precision: Precision = "fp32", device: Device = "cpu",
                 runtime: Runtime = "auto") -> None:
        self.path = Path(path).resolve()
        _check_model_dir(self.path)
        self.precision = resolve_precision(precision, device)
        self.device = resolve_device(device, self.precision)
        self._model = _load_model(str(self.path), self.precision, self.device)
        self.long_text = long_text
        base = name or f"st:{self.path.name}"
        self.id = base if long_text == "mean" else f"{base}+truncate"
        self.dim = _dimension(self._model)
        self.window = int(self._model.max_seq_length) - 2
        self.batch_size = batch_size
        self.tokenizer: HFTokenizer = HFTokenizer(self.path / "tokenizer.json")
        self._inputs = _input_names(self._model)
        if runtime not in RUNTIMES:
            raise ConfigError(f"unknown embedding runtime {runtime!r}: use auto, torch or "
                              "onnx")
        self.runtime = runtime
        self._onnx: Any = None
        self._query: Any = _NOT_YET if runtime == "auto" else None
        self._query_lock = threading.Lock()
        if runtime == "onnx":
            self._onnx = self._onnx_encoder()

    @property
    def query_runtime(self) -> str:
        """What runs a query (a call of fewer than :data:`SMALL_INPUT` windows): ``bf16``,
        ``onnx`` or ``torch``."""
        query = self._query_encoder()
        if self._onnx is not None or isinstance(query, OnnxQueries):
            return "onnx"
        return "torch" if query is None else "bf16"

    def _query_encoder(self) -> Any:
        """What ``auto`` runs queries (calls of < SMALL_INPUT windows) on, made on the first
        one: bf16 where it runs, else ONNX Runtime fp32 where it is installed and gives
        torch's vectors, else None (torch). Not made at load: an ingest, which embeds only
        batches, would hold it for nothing (about 210 MB more resident for ONNX Runtime's
        session, and its export when none is cached)."""
        if self._query is _NOT_YET:
            with self._query_lock:
                if self._query is _NOT_YET:
                    self._query = (query_encoder(self._model, self.precision, self.device)
                                   or self._onnx_queries())
        return self._query

    def _onnx_queries(self) -> OnnxQueries | None:
        """ONNX Runtime fp32 for the queries of ``auto`` on a CPU without AMX: where
        ONNX Runtime is installed, the embedder is fp32 on the CPU and the model pools by
        the mean; checked as the ``onnx`` runtime is. None (queries on torch, with a log
        line) where it cannot run or the check fails."""
        from medverify.kb import onnx_runtime

        if (self.precision != "fp32" or self.device != "cpu"
                or importlib.util.find_spec("onnxruntime") is None
                or onnx_runtime.mean_pooling_refusal(self._model) is not None):
            return None
        try:
            return OnnxQueries(self._onnx_encoder(), self.dim)
        except Exception as exc:  # no export, or other vectors: queries stay on torch
            log.warning("queries run on torch: ONNX Runtime cannot take them (%s)", exc)
            return None

    def _onnx_encoder(self) -> Any:
        """The model on ONNX Runtime (:mod:`medverify.kb.onnx_runtime`), checked to give
        torch's vectors on a probe text."""
        from medverify.kb import onnx_runtime

        if self.precision != "fp32" or self.device != "cpu":
            raise ConfigError("embed_runtime = \"onnx\" runs fp32 on the CPU: set "
                              "embed_precision = \"fp32\" and embed_device = \"cpu\"")
        encoder = onnx_runtime.load_encoder(self._model, self.path)
        windows = self.tokenizer.windows([onnx_runtime.PROBE], self.window)[0]
        torch_vector = self._forward_batches(windows)  # (on torch: no ONNX set yet)
        onnx_vector = OnnxQueries(encoder, self.dim).run(windows)
        cosine = float(np.dot(torch_vector[0], onnx_vector[0]))
        if cosine < onnx_runtime.CHECK_COSINE:
            raise KBError(f"the ONNX export of {self.path} gives other vectors than torch "
                          f"(cosine {cosine:.6f}): use embed_runtime = \"torch\"")
        return encoder

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.long_text == "truncate":
            return self.embed_legacy(texts)
        windows, owners = self.tokenizer.windows(texts, self.window)
        with _threads_for(len(windows)):
            vectors = self._forward(windows)
        sums = np.zeros((len(texts), self.dim), dtype=np.float32)
        np.add.at(sums, np.asarray(owners), vectors)
        return normalize(sums)

    def forward_throughput_input(self, texts: list[str]) -> list[list[int]]:
        """The token-id windows :meth:`embed` runs through the model for ``texts`` (for
        measuring the forward pass alone, as benchmarks/bench_ingest_speed.py does)."""
        return self.tokenizer.windows(texts, self.window)[0]

    def _forward(self, windows: list[list[int]]) -> np.ndarray:
        """Normalised vectors of the token-id windows (each with its special tokens),
        run in batches of similar length (torch, or ONNX Runtime); rows in the order
        given."""
        if len(windows) < SMALL_INPUT and (query := self._query_encoder()) is not None:
            return query.run(windows)
        return self._forward_batches(windows)

    def _forward_batches(self, windows: list[list[int]]) -> np.ndarray:
        """:meth:`_forward` on the batch runtime (torch, or ONNX Runtime where chosen)."""
        import torch

        out = np.zeros((len(windows), self.dim), dtype=np.float32)
        threads = 1 if len(windows) < SMALL_INPUT else max(1, torch.get_num_threads())
        for rows in length_batches([len(w) for w in windows], self.batch_size):
            ids, mask = _padded([windows[r] for r in rows])
            if self._onnx is not None:
                out[rows] = normalize(self._onnx.run(ids, mask, threads))
                continue
            features = {"input_ids": torch.from_numpy(ids),
                        "attention_mask": torch.from_numpy(mask)}
            if "token_type_ids" in self._inputs:
                features["token_type_ids"] = torch.zeros_like(features["input_ids"])
            features = {k: v.to(self.device) for k, v in features.items()}
            with torch.inference_mode():
                vectors = self._model(features)["sentence_embedding"]
                vectors = torch.nn.functional.normalize(vectors.float(), dim=1)
            out[rows] = vectors.cpu().numpy()
        return out

    def embed_legacy(self, texts: list[str]) -> np.ndarray:
        """The embedding path before issue 19 (kept for the benchmark's "before" and
        the ``truncate`` mode): windows cut as text and tokenised again by
        sentence-transformers' ``encode``."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        pieces, owners = self._windows(texts)
        with _threads_for(len(pieces)):
            vectors = self._model.encode(pieces, batch_size=self.batch_size,
                                         normalize_embeddings=True, convert_to_numpy=True)
        sums = np.zeros((len(texts), self.dim), dtype=np.float32)
        np.add.at(sums, np.asarray(owners), vectors.astype(np.float32))
        return normalize(sums)

    def _windows(self, texts: list[str]) -> tuple[list[str], list[int]]:
        pieces: list[str] = []
        owners: list[int] = []
        for index, text in enumerate(texts):
            if self.long_text == "truncate":
                pieces.append(text)  # the model truncates to its window
                owners.append(index)
                continue
            for piece in split_windows(text, self.tokenizer, self.window):
                pieces.append(piece)
                owners.append(index)
        return pieces, owners


def query_encoder(model: Any, precision: str, device: str) -> Any:
    """The bfloat16 encoder (:mod:`medverify.kb.bf16_encoder`) for the queries of an fp32
    embedder on the CPU, where the CPU has AMX and the model is a BERT it reproduces; None
    otherwise (queries then run as documents do). Its vectors are in the fp32 class:
    cosine to fp32 >= 0.99997 on 200 dev claims, recall@5 and the top 7 at 1M measured in
    benchmarks/results/query_path.md and search_e2e.md."""
    if precision != "fp32" or device != "cpu":
        return None
    from medverify import bf16
    from medverify.kb import bf16_encoder

    if not bf16.amx_available() or bf16_encoder.supported(model) is not None:
        return None
    return bf16_encoder.Bf16Encoder(model)


class OnnxQueries:
    """Query-sized calls (fewer than :data:`SMALL_INPUT` windows) on an
    :class:`medverify.kb.onnx_runtime.OnnxEncoder`, on one thread, batched as the ``onnx``
    runtime batches them (so the same vectors)."""

    def __init__(self, encoder: Any, dim: int) -> None:
        self.encoder = encoder
        self.dim = dim

    def run(self, windows: list[list[int]]) -> np.ndarray:
        """Normalised float32 vectors of the token-id windows, rows in the order given."""
        out = np.zeros((len(windows), self.dim), dtype=np.float32)
        for rows in length_batches([len(w) for w in windows], SMALL_INPUT):
            ids, mask = _padded([windows[r] for r in rows])
            out[rows] = normalize(self.encoder.run(ids, mask, 1))
        return out


def _padded(windows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids padded with zeros to the longest window, and the attention mask (int64)."""
    width = max(len(w) for w in windows)
    ids = np.zeros((len(windows), width), dtype=np.int64)
    mask = np.zeros((len(windows), width), dtype=np.int64)
    for i, window in enumerate(windows):
        ids[i, :len(window)] = window
        mask[i, :len(window)] = 1
    return ids, mask


def length_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of at most ``batch_size`` of similar length (sorted
    longest first, so the first batch shows the peak memory), which keeps padding small."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def _input_names(model: object) -> tuple[str, ...]:
    tokenizer = getattr(model, "tokenizer", None)
    return tuple(getattr(tokenizer, "model_input_names", ("input_ids", "attention_mask")))


_NOT_YET = object()  # (the query encoder of ``auto``, before the first query)
SMALL_INPUT = 8  # fewer texts than this (a query) are embedded on one torch thread


@contextlib.contextmanager
def _threads_for(count: int) -> Iterator[None]:
    """One torch thread for tiny inputs: a single query gains little from a second core
    and, on a busy machine, loses a lot to thread hand-off (measured: p50 34 ms on one
    thread vs 494 ms on two under load 6 on 2 cores; see benchmarks/results)."""
    import torch

    if count >= SMALL_INPUT:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _dimension(model: object) -> int:
    getter = getattr(model, "get_embedding_dimension", None)
    if getter is None:
        getter = model.get_sentence_embedding_dimension  # type: ignore[attr-defined]
    return int(getter() or 0)


def _check_model_dir(path: Path) -> None:
    if not (path / "modules.json").is_file() or not (path / "tokenizer.json").is_file():
        raise ConfigError(
            f"{path} is not a sentence-transformers model directory "
            "(expected modules.json and tokenizer.json)")


@functools.lru_cache(maxsize=4)
def _load_model(path: str, precision: str = "fp32", device: str = "cpu"):  # type: ignore[no-untyped-def]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    model = SentenceTransformer(path, device="cpu", local_files_only=True)
    if precision == "int8":
        return quantize_int8(model)
    if device == "cuda":
        return model.half().to("cuda")
    return model


def quantize_int8(model):  # type: ignore[no-untyped-def]
    """The model with its Linear layers dynamically quantised to int8 (per-channel int8
    weights, activations quantised per batch; CPU only), in place: all but the FFN's
    down-projections (BERT's ``layer.N.output.dense``), whose inputs (after GELU) have
    outliers that per-tensor int8 activations flatten. Measured on Check-COVID abstracts
    (mean cosine to the fp32 vector): every Linear per-tensor 0.939 (recall@5 -0.02 to
    -0.05), every Linear per-channel 0.981, all but the FFN outputs 0.991
    (benchmarks/results/ingest_speed.md)."""
    import warnings

    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig

    spec = {name: per_channel_dynamic_qconfig for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and not _ffn_output(name)}
    with warnings.catch_warnings():  # torch.ao's "migrate to torchao" deprecation notice
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model.eval(), spec, dtype=torch.qint8,
                                                      inplace=True)


def _ffn_output(name: str) -> bool:
    return name.endswith("output.dense") and ".attention." not in name
