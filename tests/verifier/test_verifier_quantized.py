"""Tests of the batched int8 scoring with per-window activation scales (issue 45): a window's
scores do not depend on the windows it is batched with, nor on padding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from medverify.verifier.infer import quantize_model, score_windows, torch_threads
from medverify.verifier.model import CrossEncoder, load_tokenizer
from medverify.verifier.quantized import (
    BUCKET_STEP,
    Int8Encoder,
    bucket_batches,
    quantize_windows,
    score_windows_fixed,
)

PAIR = ("Aspirin lowers fever in adults.", "In adults, aspirin lowered fever within hours.")
# Companions of the same length bucket and of others, with other activation ranges.
OTHERS = [(f"Drug {i} raises blood pressure.", "Drug 1 lowered blood pressure. " * i)
          for i in range(1, 9)] + [("x", "y"), ("IL-6 >> 1000 pg/mL", "IL-6 was 4000 pg/mL.")]


@pytest.fixture(scope="module")
def tiny():
    """A random 2-layer, 64-wide cross-encoder (int8) and the verifier's tokenizer."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=128)
    model = CrossEncoder(BertModel(config, add_pooling_layer=False)).eval()
    with torch.no_grad():  # a wider head: the scores are not all alike
        model.head.weight.normal_(0, 2.0)
    with torch_threads(1):  # as the Verifier scores (two threads crawl on a busy machine)
        yield quantize_model(model).eval(), load_tokenizer()


def test_padded_rows_do_not_change_a_windows_scale() -> None:
    torch.manual_seed(1)
    x = torch.randn(2, BUCKET_STEP, 8)
    real = torch.arange(BUCKET_STEP)[None, :] < torch.tensor([[5], [BUCKET_STEP]])
    q, scale = quantize_windows(x, real)
    noisy = x.clone()
    noisy[0, 5:] = 1000.0  # padding far outside the window's range
    q2, scale2 = quantize_windows(noisy, real)
    assert torch.equal(scale, scale2) and torch.equal(q[:5], q2[:5])
    assert torch.equal(q[BUCKET_STEP:], q2[BUCKET_STEP:])
    # each window's own range: one int8 step of the first window is not the second's
    assert scale[0] != scale[BUCKET_STEP]


def test_a_windows_scores_do_not_depend_on_its_batch(tiny) -> None:
    model, tokenizer = tiny
    encoder = Int8Encoder(model)
    alone = score_windows_fixed(encoder, tokenizer, [PAIR], 64)[0]
    for batch_size in (3, 32):
        for pairs in ([*OTHERS[:5], PAIR, *OTHERS[5:]], [PAIR, *OTHERS[::-1]]):
            for workers in (1, 2):
                scores = score_windows_fixed(encoder, tokenizer, pairs, 64, batch_size, workers)
                assert np.array_equal(scores[pairs.index(PAIR)], alone)
    assert np.allclose(alone.sum(), 1.0, atol=1e-5)
    # torch's dynamic int8 in one batch does move the pair (what the above guards against)
    batched = score_windows(model, tokenizer, [*OTHERS[:5], PAIR, *OTHERS[5:]], 64, 32)[5]
    assert np.abs(batched - alone).max() > 1e-6


def test_close_to_dynamic_int8_one_window_at_a_time(tiny) -> None:
    model, tokenizer = tiny
    pairs = [PAIR, *OTHERS]
    new = score_windows_fixed(Int8Encoder(model), tokenizer, pairs, 64)
    per_window = score_windows(model, tokenizer, pairs, 64, 1)
    assert np.abs(new - per_window).max() < 0.02


def test_buckets_hold_one_padded_length() -> None:
    batches = bucket_batches([3, 17, 16, 40, 200, 5], batch_size=2, max_tokens=64)
    assert batches == [(16, [0, 2]), (16, [5]), (32, [1]), (48, [3]), (64, [4])]
    assert [len(b[1]) for b in bucket_batches([250] * 9, 32, 256)] == [4, 4, 1]  # 1,024 tokens
