"""One BERT encoder layer run outside the transformers modules, over a chosen Linear kind.

:class:`EncoderLayer` is the forward shared by the lean BERT encoders: the verifier's window
encoders (:mod:`medverify.verifier.quantized`, int8 or bfloat16 Linears) and the bfloat16
query encoder (:mod:`medverify.kb.bf16_encoder`). The callers keep what differs: the
embeddings, the padding, the attention kernel (``attend``: the verifier masks padded keys,
the query encoder attends over a window's real rows alone) and the pooling. A Linear kind
is made as ``linear(modules, gelu=...)`` and called as ``linear(x, real)``, ``real`` the
caller's mask of real rows (int8 picks its activation scales over them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def split_heads(qkv: torch.Tensor, heads: int) -> tuple[torch.Tensor, ...]:
    """Query, key and value (..., heads, L, size) of fused products ``qkv`` (..., L, 3 W)
    (views: no copy)."""
    size = qkv.shape[-1] // (3 * heads)
    return qkv.unflatten(-1, (3, heads, size)).movedim(-3, 0).transpose(-3, -2).unbind(0)


def merge_heads(att: torch.Tensor) -> torch.Tensor:
    """(..., L, W) of per-head outputs ``att`` (..., heads, L, size)."""
    return att.transpose(-3, -2).flatten(-2)


class EncoderLayer:
    """One BERT encoder layer (a transformers ``BertLayer``) with its Linears made by
    ``linear``; the LayerNorms stay the model's float32 modules."""

    def __init__(self, layer: Any, heads: int, linear: Callable[..., Any]) -> None:
        attention = layer.attention
        self.qkv = linear([attention.self.query, attention.self.key, attention.self.value])
        self.attention_out = linear([attention.output.dense])
        self.norm1 = attention.output.LayerNorm
        self.up = linear([layer.intermediate.dense], gelu=True)
        self.down = linear([layer.output.dense])
        self.norm2 = layer.output.LayerNorm
        self.heads = heads

    def __call__(self, h: torch.Tensor, attend: Attend,
                 real: torch.Tensor | None = None) -> torch.Tensor:
        """The layer's output for ``h`` (..., L, W): ``attend(query, key, value)`` gives the
        attention's (..., heads, L, size); ``real`` goes to every Linear."""
        att = merge_heads(attend(*split_heads(self.qkv(h, real), self.heads)))
        h = self.norm1(self.attention_out(att, real) + h)
        return self.norm2(self.down(self.up(h, real), real) + h)


def encoder_layers(bert: Any, linear: Callable[..., Any]) -> list[EncoderLayer]:
    """The :class:`EncoderLayer` of every layer of a transformers ``BertModel``."""
    heads = int(bert.config.num_attention_heads)
    return [EncoderLayer(layer, heads, linear) for layer in bert.encoder.layer]
