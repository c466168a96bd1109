"""Batched scoring of verifier windows whose scores do not depend on the batch (issue 45):
int8 with one activation scale per window ("window_scales"), or bfloat16 on AMX ("bf16").

Both run one lean encoder (:class:`WindowEncoder`: fixed length buckets, the layers of
:class:`medverify.bert_layer.EncoderLayer` with attention under the key mask, mean pooling over
real tokens, the head) and differ only in their Linear layers: :class:`Int8Linear` or
:class:`Bf16Linear`.

Int8: torch's dynamic int8 Linear picks one activation scale for its whole input, so in a batch a
window's scores moved with its companions (issue 27). Here every window's activations get
their own scale and zero point, chosen over its real tokens the way the dynamic Linear
chooses them for a window scored alone (7-bit unsigned range, fbgemm's ``reduce_range``),
and the products are integer (``torch._int_mm``: int8 x int8 summed in int32, exact, so a
row's result does not depend on the other rows). Windows are padded to a fixed length
bucket (a multiple of :data:`BUCKET_STEP` word pieces, whatever their companions) and
batched only with windows of the same bucket, so the float parts (embeddings, attention,
layer norms) see the same shapes too. The query, key and value projections share one
quantised input and run as one product.

bfloat16 (:class:`Bf16Linear`, :class:`~medverify.bf16.PackedBf16Linear`): the float weights
packed once for the CPU's AMX tiles; every row is multiplied alone (bitwise the same whatever
the other rows and the thread count), with no per-window quantisation at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from medverify import bf16
from medverify.bert_layer import encoder_layers
from medverify.verifier.windows import MAX_CLAIM_TOKENS

BUCKET_STEP = 16  # windows are padded to a multiple of this many word pieces
# Rows per integer product: torch's int8 product ran at 1.6-1.8 us of CPU a row (K=384,
# N=1536) for 64-112 rows a call and at 4 us for 3,584 rows (exploratory timings on the
# 2-core machine); the rows' results are exact integers whatever the chunk.
_ROWS_PER_PRODUCT = 128
# Padded tokens per batch (beyond one window): with 1,024, Check-COVID's 256-token windows
# scored at 34 windows per CPU second against 29-31 with 2,048 or 8,192 (HealthVer's short
# ones 77-82 either way; exploratory CPU-time runs, 40 pairs each, on the busy 2-core machine):
# smaller batches keep each step's tensors in cache.
TOKENS_PER_BATCH = 1024
# Rows of every packed bfloat16 product (see Bf16Linear). One thread, the four products
# of a layer over 4,096 rows: 16 rows a product 340 ms, 32 321, 64 231, 128 132, 256 116,
# 512 116, one call 114 (exploratory timing at load 7 on the 2-core machine).
BF16_ROWS = 128
# bfloat16 batches: padded tokens and windows a batch. Provisional: before the GELU was
# fused, 1,024 / 2,048 / 4,096 / 8,192 tokens gave 70 / 76 / 70 / 69 HealthVer pairs per CPU
# second and 10 / 12 / 11 / 11 on Check-COVID (one thread, load 10: no clear winner).
BF16_TOKENS_PER_BATCH = 4096
BF16_WINDOWS_PER_BATCH = 128
_QMAX = 127  # the dynamic Linear's activation range with reduce_range: 0..127


def _dynamic_weight(linear: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(int8 weight (N, K), its scale (1,), float bias (N,)) of a dynamic int8 Linear."""
    weight = linear.weight()
    n = weight.shape[0]
    bias = linear.bias()
    bias = torch.zeros(n) if bias is None else bias.detach().float()
    return weight.int_repr(), torch.tensor([float(weight.q_scale())]), bias


class Int8Linear:
    """One or more dynamic int8 Linears of the same input, fused into one integer product."""

    def __init__(self, linears: Sequence[torch.nn.Module], gelu: bool = False) -> None:
        self.gelu = gelu  # GELU on the outputs (the feed-forward's up projection)
        parts = [_dynamic_weight(linear) for linear in linears]
        weight = torch.cat([p[0] for p in parts]).contiguous()
        self.weight_t = weight.t()  # a (K, N) view: the layout _int_mm runs fastest on
        self.scale = torch.cat([p[1] for p in parts])  # (parts,)
        self.bias = torch.cat([p[2] for p in parts]).view(len(parts), -1)

    def product(self, q: torch.Tensor, row_scale: torch.Tensor) -> torch.Tensor:
        """Float (M, N) outputs of int8 rows ``q`` (M, K) quantised with ``row_scale`` (M, 1)."""
        acc = torch.empty(q.shape[0], self.weight_t.shape[1], dtype=torch.int32)
        for start in range(0, q.shape[0], _ROWS_PER_PRODUCT):
            stop = start + _ROWS_PER_PRODUCT
            torch._int_mm(q[start:stop], self.weight_t, out=acc[start:stop])
        parts = self.scale.shape[0]  # one weight scale per fused Linear
        scale = (row_scale[:, None, :] * self.scale[None, :, None])  # (M, parts, 1)
        out = acc.float().view(q.shape[0], parts, -1).mul_(scale).add_(self.bias)
        return out.view(q.shape[0], -1)

    def __call__(self, x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """Float (B, L, N) of windows ``x`` (B, L, K), each quantised over its ``real`` rows."""
        out = self.product(*quantize_windows(x, real)).view(*x.shape[:-1], -1)
        return F.gelu(out) if self.gelu else out


class Bf16Linear(bf16.Bf16Linear):
    """One or more float Linears of the same input as one packed bfloat16 product (AMX).

    Rows are multiplied in products of exactly :data:`BF16_ROWS` rows (the last one padded
    with zeros): oneDNN picks its kernel by the row count, and with K 1,536 (the
    feed-forward's down projection) 48 to 256 rows summed in another order than 2,048 (up
    to 2.4e-4 apart), which moved a window's probabilities by up to 0.003 between alone and
    batched. With one row count every row takes the same path whatever its companions.
    With ``gelu`` the GELU runs inside the product (oneDNN's post-op, on the float32 sums)
    and the outputs stay bfloat16 (the next product's input); otherwise they are float32.
    Every row is computed alone, so the window mask is not needed."""

    def __init__(self, linears: Sequence[torch.nn.Linear], gelu: bool = False) -> None:
        super().__init__(linears, gelu=gelu, rows=BF16_ROWS)


def quantize_windows(x: torch.Tensor, real: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Int8 rows of ``x`` (B, L, K) with one scale per window, over its ``real`` (B, L) rows.

    The range always holds 0 (as the dynamic Linear's does), so padded rows cannot widen
    it; the zero point is folded in (values minus zero point fit in int8)."""
    low, high = x.amin(dim=-1), x.amax(dim=-1)  # faster than aminmax(dim=-1)
    low = torch.where(real, low, 0.0).amin(dim=1).clamp(max=0.0)
    high = torch.where(real, high, 0.0).amax(dim=1).clamp(min=0.0)
    scale = (high.double() - low.double()) / _QMAX
    scale = torch.where(scale.float() == 0, 0.1, scale)
    zero = torch.round(-low.double() / scale).clamp(0, _QMAX).float()[:, None, None]
    scale = scale.float()[:, None, None]
    q = torch.addcmul(zero, x, 1.0 / scale).round_().clamp_(0, _QMAX).sub_(zero)
    rows = x.shape[0] * x.shape[1]
    return q.to(torch.int8).view(rows, -1), scale.expand(-1, x.shape[1], 1).reshape(rows, 1)


class WindowEncoder:
    """A :class:`~medverify.verifier.model.CrossEncoder` run in fixed-shape batches with
    Linears of kind :attr:`linear`: logits of a window never depend on the windows it is
    batched with (subclasses pick the kind and the padded tokens per batch)."""

    linear: Callable[..., Any] = Int8Linear
    tokens_per_batch: int = TOKENS_PER_BATCH
    windows_per_batch: int | None = None  # None: the caller's batch size

    def __init__(self, model: torch.nn.Module) -> None:
        self.embeddings = model.encoder.embeddings
        self.layers = encoder_layers(model.encoder, self.linear)
        self.head = self.linear([model.head])

    def logits(self, ids: torch.Tensor, types: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, 3) logits of windows padded to one length, ``lengths`` real tokens each."""
        real = torch.arange(ids.shape[1])[None, :] < lengths[:, None]
        keys = real[:, None, None, :]

        def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(query, key, value, attn_mask=keys)

        h = self.embeddings(input_ids=ids, token_type_ids=types)
        for layer in self.layers:
            h = layer(h, attend, real)
        mask = real.unsqueeze(-1).to(h.dtype)
        pooled = ((h * mask).sum(1) / mask.sum(1).clamp(min=1.0))[:, None, :]
        return self.head(pooled, torch.ones(pooled.shape[:2], dtype=torch.bool))[:, 0]


class Int8Encoder(WindowEncoder):
    """A dynamically quantised cross-encoder with per-window activation scales ("window_scales")."""

    linear = Int8Linear


class Bf16Encoder(WindowEncoder):
    """A float cross-encoder with packed bfloat16 Linears on AMX ("bf16"; needs
    :func:`medverify.bf16.amx_available`)."""

    linear = Bf16Linear
    tokens_per_batch = BF16_TOKENS_PER_BATCH
    windows_per_batch = BF16_WINDOWS_PER_BATCH


def tokenize_windows(tokenizer: Any, pairs: Sequence[tuple[str, str]], max_tokens: int) -> list:
    """Token ids and type ids of (claim, window) pairs, the claim capped, no padding."""
    claims = [
        tokenizer.convert_tokens_to_string(tokenizer.tokenize(c)[:MAX_CLAIM_TOKENS])
        for c, _ in pairs
    ]
    enc = tokenizer(claims, [w for _, w in pairs], truncation="only_second",
                    max_length=max_tokens)
    return list(zip(enc["input_ids"], enc["token_type_ids"], strict=True))


def bucket_batches(lengths: Sequence[int], batch_size: int, max_tokens: int,
                   tokens_per_batch: int = TOKENS_PER_BATCH) -> list:
    """(padded length, window indices) batches: windows of one length bucket together, at
    most ``batch_size`` of them and (beyond one window) ``tokens_per_batch`` padded tokens."""
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(min(max_tokens, -(-n // BUCKET_STEP) * BUCKET_STEP), []).append(i)
    out = []
    for size, members in sorted(groups.items()):
        step = max(1, min(batch_size, tokens_per_batch // size))
        out.extend((size, members[start : start + step]) for start in range(0, len(members), step))
    return out


def _score_batch(encoder: WindowEncoder, encoded: list, size: int, idx: list[int]) -> np.ndarray:
    """Probabilities of one batch of windows padded to ``size`` tokens."""
    ids = np.zeros((len(idx), size), dtype=np.int64)
    types = np.zeros_like(ids)
    for row, i in enumerate(idx):
        n = len(encoded[i][0])
        ids[row, :n] = encoded[i][0]
        types[row, :n] = encoded[i][1]
    lengths = torch.tensor([len(encoded[i][0]) for i in idx])
    with torch.inference_mode():
        logits = encoder.logits(torch.from_numpy(ids), torch.from_numpy(types), lengths)
        return torch.softmax(logits, dim=-1).numpy()


def score_windows_fixed(encoder: WindowEncoder, tokenizer: Any,
                        pairs: Sequence[tuple[str, str]], max_tokens: int, batch_size: int = 32,
                        workers: int = 1) -> np.ndarray:
    """(n, 3) float32 probabilities of already-windowed pairs, batch-independent.

    ``batch_size`` caps the windows of a batch unless the encoder sets its own
    (``windows_per_batch``); ``workers`` > 1 scores batches on that many threads at once
    (each batch on the calling thread's torch threads): a batch's result is the same on
    whichever thread."""
    out = np.zeros((len(pairs), 3), dtype=np.float32)
    if not pairs:
        return out
    encoded = tokenize_windows(tokenizer, pairs, max_tokens)
    batches = bucket_batches([len(ids) for ids, _ in encoded],
                             encoder.windows_per_batch or batch_size, max_tokens,
                             encoder.tokens_per_batch)
    if workers > 1 and len(batches) > 1:
        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(lambda b: _score_batch(encoder, encoded, *b), batches))
    else:
        results = [_score_batch(encoder, encoded, *b) for b in batches]
    for (_, idx), probs in zip(batches, results, strict=True):
        out[idx] = probs
    return out
