"""The shared lean BERT layer (:mod:`medverify.bert_layer`): with float32 Linears and
masked attention it computes what transformers' BERT computes on the real tokens; the heads
split and merge as BERT lays them out; every Linear gets the caller's row mask."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F

from medverify.bert_layer import encoder_layers, merge_heads, split_heads


class FloatLinear:
    """A float32 Linear kind (the modules' own weights), recording the masks it is given."""

    masks: ClassVar[list[torch.Tensor | None]] = []

    def __init__(self, linears: Sequence[torch.nn.Linear], gelu: bool = False) -> None:
        self.weight = torch.cat([lin.weight for lin in linears])
        self.bias = torch.cat([lin.bias for lin in linears])
        self.gelu = gelu

    def __call__(self, x: torch.Tensor, real: torch.Tensor | None) -> torch.Tensor:
        FloatLinear.masks.append(real)
        out = F.linear(x, self.weight, self.bias)
        return F.gelu(out) if self.gelu else out


@pytest.fixture(scope="module")
def bert():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=64)
    return BertModel(config, add_pooling_layer=False).eval()


def test_float_layers_are_berts_forward_on_real_tokens(bert) -> None:
    torch.manual_seed(1)
    ids = torch.randint(1, 1000, (3, 12))
    lengths = torch.tensor([12, 7, 1])
    real = torch.arange(12)[None, :] < lengths[:, None]
    FloatLinear.masks = []
    layers = encoder_layers(bert, FloatLinear)
    assert len(layers) == 2 and len(FloatLinear.masks) == 0
    with torch.inference_mode():
        want = bert(input_ids=ids, attention_mask=real.long()).last_hidden_state
        h = bert.embeddings(input_ids=ids)

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=real[:, None, None, :])

        for layer in layers:
            h = layer(h, attend, real)
    assert h.shape == want.shape
    assert torch.allclose(h[real], want[real], atol=1e-5)
    assert len(FloatLinear.masks) == 8 and all(m is real for m in FloatLinear.masks)


def test_heads_split_as_bert_lays_them_out() -> None:
    torch.manual_seed(2)
    qkv = torch.randn(2, 5, 3 * 12)  # 2 windows, 5 rows, 4 heads of 3
    q, k, v = split_heads(qkv, 4)
    assert q.shape == (2, 4, 5, 3)
    # head 1 of the key: columns 12 + 3..6 of every row
    assert torch.equal(k[:, 1], qkv[..., 15:18])
    assert torch.equal(v[1, 3, 2], qkv[1, 2, 24 + 9 : 24 + 12])
    assert torch.equal(merge_heads(q), qkv[..., :12])
    # no batch dimension (the query encoder's one window)
    q1, _, _ = split_heads(qkv[0], 4)
    assert torch.equal(q1, q[0]) and torch.equal(merge_heads(q1), qkv[0, :, :12])
