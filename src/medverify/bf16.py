"""bfloat16 Linear layers for CPUs with AMX: weights packed once, rows computed independently.

Intel CPUs from Sapphire Rapids on have AMX tiles that multiply bfloat16 matrices (summing
in float32) many times faster than float32 arithmetic. Torch reaches them through oneDNN,
but an ordinary ``F.linear`` on bfloat16 re-packs the weight on every call, which dominates
small products (a 26-token query). :class:`PackedBf16Linear` packs the weight once
(``torch.ops.mkldnn._reorder_linear_weight``) and multiplies with
``torch.ops.mkldnn._linear_pointwise``.

Measured on the project's 2-core machine (one thread, K 384, N 1536): 512 rows 0.57 ms
against 4.3 ms in float32 and 0.91 ms for ``torch._int_mm``; 26 rows 0.08 ms against 0.33
ms in float32. In a product of a given number of rows, a row's result is bitwise the same
whatever the other rows hold and wherever it sits, on one or two threads. Across row counts
it is not always: with K 1536 (BERT's FFN down-projection) oneDNN sums in another order for
48-300 rows than for 1-16 or 512 and more (K 384 agreed at every count tried). A caller that
needs batch-independent results (the verifier) multiplies in products of one fixed row count
(``tests/test_bf16.py`` checks the first fact; the second is what made the verifier pad).
:class:`Bf16Linear` is the packed product as a Linear kind of
:class:`medverify.bert_layer.EncoderLayer`, optionally in products of one fixed row count.

The inputs and the outputs are bfloat16 (8 significant bits), so results differ from
float32 by about 0.4 % per product; each caller measures what that does to its own
quality (the verifier's labels, the query vectors' neighbours) before using it. These are
private torch operators: :func:`amx_available` says whether they and the hardware are
here, and callers fall back to their float32 or int8 paths when not.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

ROWS_HINT = 64  # rows the packed layout is tuned for (any row count gives the same results)


@functools.cache
def amx_available() -> bool:
    """True when the CPU has AMX bfloat16 tiles and torch has the packed-weight operators."""
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        if not (torch.cpu._is_amx_tile_supported() and torch.cpu._is_avx512_bf16_supported()):
            return False
        ops = torch.ops.mkldnn
        return callable(ops._reorder_linear_weight) and callable(ops._linear_pointwise)
    except (AttributeError, RuntimeError):
        return False


class PackedBf16Linear:
    """One or more ``nn.Linear`` of the same input, fused into one packed bfloat16 product:
    float inputs (M, K) give float32 outputs (M, sum of N), the parts side by side."""

    def __init__(self, linears: Sequence[torch.nn.Linear], rows_hint: int = ROWS_HINT) -> None:
        weight = torch.cat([lin.weight.detach().float() for lin in linears])
        biases = [lin.bias.detach().float() if lin.bias is not None
                  else torch.zeros(lin.weight.shape[0]) for lin in linears]
        self.out_features = int(weight.shape[0])
        self.in_features = int(weight.shape[1])
        self.bias = torch.cat(biases).to(torch.bfloat16)
        self.weight = torch.ops.mkldnn._reorder_linear_weight(
            weight.to(torch.bfloat16).contiguous(), rows_hint)

    def product(self, x: torch.Tensor, gelu: bool = False) -> torch.Tensor:
        """bfloat16 (..., N) of ``x`` (..., K), float32 sums rounded once; with ``gelu``
        the (erf) GELU runs on the sums inside the product (oneDNN's post-op)."""
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        out = torch.ops.mkldnn._linear_pointwise(rows, self.weight, self.bias,
                                                 "gelu" if gelu else "none", [], "none")
        return out.view(*x.shape[:-1], self.out_features)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """float32 (..., N) of ``x`` (..., K), computed in bfloat16 with float32 sums."""
        return self.product(x).float()


class Bf16Linear:
    """A :class:`PackedBf16Linear` as a Linear kind of :class:`medverify.bert_layer.EncoderLayer`:
    ``gelu`` fixed (then the outputs stay bfloat16, the next product's input; otherwise
    float32), called as ``linear(x, real)`` with ``real`` ignored (every row is computed
    alone). With ``rows``, every product runs on exactly that many rows, the last one padded
    with zeros (a caller whose row counts vary, and who needs a row's result not to: see the
    module docstring); without, all of ``x``'s rows in one product."""

    def __init__(self, linears: Sequence[torch.nn.Linear], gelu: bool = False,
                 rows: int | None = None) -> None:
        self.packed = PackedBf16Linear(linears, rows_hint=rows or ROWS_HINT)
        self.gelu = gelu
        self.rows = rows

    def __call__(self, x: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
        """(..., N) of ``x`` (..., K), computed in bfloat16 with float32 sums."""
        out = self.packed.product(x, gelu=self.gelu) if self.rows is None else self._fixed(x)
        return out if self.gelu else out.float()

    def _fixed(self, x: torch.Tensor) -> torch.Tensor:
        """bfloat16 (..., N) of ``x`` (..., K), in products of exactly ``rows`` rows."""
        rows = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
        m, step = rows.shape[0], int(self.rows or 0)
        full = m - m % step
        outs = [self.packed.product(rows[start : start + step], gelu=self.gelu)
                for start in range(0, full, step)]
        if full < m:
            last = torch.nn.functional.pad(rows[full:], (0, 0, 0, step - (m - full)))
            outs.append(self.packed.product(last, gelu=self.gelu)[: m - full])
        return (torch.cat(outs) if len(outs) > 1 else outs[0]).view(*x.shape[:-1], -1)
