"""A BERT sentence encoder (mean pooling) computed in bfloat16 on CPUs with AMX.

:class:`Bf16Encoder` runs the forward pass of a sentence-transformers BERT model (MiniLM:
absolute positions, erf GELU, mean pooling) without the transformers modules: the layers of
:class:`medverify.bert_layer.EncoderLayer` (shared with the verifier) over
:class:`medverify.bf16.Bf16Linear` (weights packed once; the query, key and value products
fused into one), LayerNorms, residuals, attention and pooling in float32. Vectors at
cosine >= 0.99997 to fp32 on 200 dev claims. On the quiet machine, at 1M passages: query
embedding p50 12.6 ms against 23.2 for torch fp32 and 16.1 for ONNX Runtime fp32
(benchmarks/bench_search_e2e.py, benchmarks/results/search_e2e.md).

Each window runs alone, its rows padded to a multiple of :data:`ROW_STEP`. The packed
product's rows are independent only at a fixed row count (measured: with K 1536, a row's
result changes in the last bits between 40 and 1,000 rows, not within one row count), so a
row count set by the window's own length makes its vector bitwise the same whatever other
windows share the call (``tests/kb/test_bf16_encoder.py``), with one oneDNN kernel per
16-token bucket (a new row count costs ~1 ms to prepare, once). The feed-forward's GELU
runs inside the up projection and its output stays bfloat16 for the down projection.

What it cannot be trusted with: any model that is not a BERT with absolute positions, erf
GELU and mean pooling (:func:`supported` refuses it, the caller falls back to fp32); and
bitwise agreement with fp32 (each product is rounded to bfloat16's 8 significant bits:
about 1e-5 of cosine on MiniLM's queries, measured; other models must be measured again).
Used by :class:`medverify.kb.sentence_embed.SentenceTransformerEmbedder` when its runtime
is ``bf16``, or ``auto`` for query-sized calls, and only where
:func:`medverify.bf16.amx_available` says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from medverify.bert_layer import encoder_layers
from medverify.bf16 import Bf16Linear

# A window's rows are padded to a multiple of this: its products then run on a row count
# that depends on its length alone (a window's vector is the same bytes whatever shares
# the call), and oneDNN prepares one kernel per 16-token bucket, once (~1 ms each).
ROW_STEP = 16


def supported(model: Any) -> str | None:
    """Why ``model`` (a SentenceTransformer) cannot run here; None when it can."""
    modules = list(model)
    bert = getattr(modules[0], "auto_model", None) if modules else None
    config = getattr(bert, "config", None)
    if config is None or getattr(config, "model_type", None) != "bert":
        return "not a BERT model"
    if getattr(config, "position_embedding_type", "absolute") != "absolute":
        return "positions are not absolute"
    if getattr(config, "hidden_act", None) != "gelu":
        return f"activation {getattr(config, 'hidden_act', None)!r}, not gelu"
    if getattr(config, "is_decoder", False):
        return "a decoder"
    from medverify.kb.onnx_runtime import mean_pooling_refusal

    return mean_pooling_refusal(model)


class Bf16Encoder:
    """The BERT of a SentenceTransformer, packed once; :meth:`run` gives normalised,
    mean-pooled float32 vectors of token-id windows (with their special tokens)."""

    def __init__(self, model: Any) -> None:
        import torch

        refusal = supported(model)
        if refusal is not None:
            raise ValueError(f"the bfloat16 encoder cannot run this model: {refusal}")
        bert = model[0].auto_model.eval()
        emb = bert.embeddings
        self.width = int(bert.config.hidden_size)
        self.word = emb.word_embeddings.weight.detach().float().clone()
        # token type 0 for every token (a single text): its row added to every position
        self.position = (emb.position_embeddings.weight.detach().float()
                         + emb.token_type_embeddings.weight.detach().float()[0]).clone()
        self.norm0 = emb.LayerNorm
        with torch.no_grad():
            self.layers = encoder_layers(bert, Bf16Linear)

    @property
    def max_tokens(self) -> int:
        return int(self.position.shape[0])

    def run(self, windows: list[list[int]]) -> np.ndarray:
        """(len(windows), width) float32 L2-normalised vectors, rows in the order given."""
        import torch

        if not windows:
            return np.zeros((0, self.width), dtype=np.float32)
        lengths = [len(w) for w in windows]
        if min(lengths) < 1 or max(lengths) > self.max_tokens:
            raise ValueError(f"windows must hold 1 to {self.max_tokens} tokens")
        with torch.inference_mode():
            pooled = torch.stack([self._window(w) for w in windows])
            vectors = torch.nn.functional.normalize(pooled, dim=1)
        return vectors.numpy().astype(np.float32, copy=False)

    def _window(self, window: list[int]) -> Any:
        """The mean-pooled (width,) float32 output of one window, its rows padded to a
        multiple of ROW_STEP (padding rows are computed, never attended to or pooled)."""
        import torch

        n = len(window)
        ids = torch.zeros(-(-n // ROW_STEP) * ROW_STEP, dtype=torch.long)
        ids[:n] = torch.tensor(window, dtype=torch.long)
        positions = torch.zeros_like(ids)
        positions[:n] = torch.arange(n)
        x = self.norm0(self.word[ids] + self.position[positions])
        for layer in self.layers:
            x = layer(x, lambda q, k, v: self._attention(q, k, v, n))
        return x[:n].mean(0)

    def _attention(self, q: Any, k: Any, v: Any, n: int) -> Any:
        """Self-attention (heads, rows, size) of the window's ``n`` tokens (no mask);
        padding rows get zeros."""
        import torch

        out = q.new_zeros(q.shape)
        q, k, v = (t[..., :n, :] for t in (q, k, v))
        probs = torch.softmax(torch.bmm(q * q.shape[-1] ** -0.5, k.transpose(1, 2)), dim=-1)
        out[..., :n, :] = torch.bmm(probs, v)
        return out
