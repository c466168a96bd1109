"""Tests of the bfloat16 scoring of verifier windows ("bf16", issue 45): close to the float
model, a window's probabilities bitwise the same alone and in any batch, on one or two
workers and threads; "auto" picks int8 window scales (bf16 is opt-in)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from medverify.bf16 import amx_available
from medverify.errors import ConfigError
from medverify.verifier import infer
from medverify.verifier.infer import Verifier, quantize_model, score_windows, torch_threads
from medverify.verifier.model import CrossEncoder, load_tokenizer
from medverify.verifier.quantized import BF16_ROWS, Bf16Encoder, score_windows_fixed

needs_amx = pytest.mark.skipif(not amx_available(), reason="this CPU has no AMX bfloat16")

PAIR = ("Vitamin D supplements prevent COVID-19 infection.",
        "In a randomised trial of 2,000 adults, vitamin D3 did not reduce the rate of "
        "SARS-CoV-2 infection over six months (3.2 % vs 3.0 % with placebo).")
# Real-looking companions of many lengths: several length buckets, and batches whose rows
# cross the BF16_ROWS product boundaries at other places than the pair alone.
OTHERS = [
    ("Masks reduce transmission of respiratory viruses.",
     "Community mask wearing was associated with a 53 % lower incidence of COVID-19."),
    ("Ivermectin cures COVID-19.", "Ivermectin did not shorten time to recovery. " * 6),
    ("Hydroxychloroquine is safe for all patients.",
     "QT prolongation was seen in 12 of 90 patients; two had torsades de pointes."),
    ("x", "y"),
    ("IL-6 >> 1000 pg/mL predicts death.", "IL-6 above 80 pg/mL was associated with "
     "respiratory failure (odds ratio 22). " * 3),
    *[(f"Drug {i} raises blood pressure.", "Drug 1 lowered blood pressure by 5 mmHg. " * i)
      for i in range(1, 10)],
]


@pytest.fixture(scope="module")
def wide():
    """A random one-layer cross-encoder with the shipped widths (384, feed-forward 1,536:
    the down projection's long sums are where row counts once mattered) and the tokenizer."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(hidden_size=384, num_hidden_layers=1, num_attention_heads=12,
                        intermediate_size=1536, max_position_embeddings=128)
    model = CrossEncoder(BertModel(config, add_pooling_layer=False)).eval()
    with torch.no_grad():  # a wider head: the scores are not all alike
        model.head.weight.normal_(0, 0.5)
    return model, load_tokenizer()


@needs_amx
def test_bf16_is_close_to_the_float_model(wide) -> None:
    model, tokenizer = wide
    pairs = [PAIR, *OTHERS]
    with torch_threads(1):
        bf16 = score_windows_fixed(Bf16Encoder(model), tokenizer, pairs, 128)
        float32 = score_windows(model, tokenizer, pairs, 128, 1)
    assert np.allclose(bf16.sum(1), 1.0, atol=1e-5)
    assert np.abs(bf16 - float32).max() < 0.02
    assert not np.array_equal(bf16, float32)  # it is bfloat16 arithmetic, not float32


@needs_amx
def test_a_windows_bf16_scores_do_not_depend_on_its_batch(wide) -> None:
    model, tokenizer = wide
    encoder = Bf16Encoder(model)
    with torch_threads(1):
        alone = score_windows_fixed(encoder, tokenizer, [PAIR], 128)[0]
    orders = ([*OTHERS[:5], PAIR, *OTHERS[5:]], [*OTHERS[::-1], PAIR] * 2)
    for pairs, runs in zip(orders, (((3, 1, 1), (32, 2, 1)), ((256, 1, 2),)), strict=True):
        assert sum(len(tokenizer(c, w)["input_ids"]) for c, w in pairs) > BF16_ROWS
        for batch_size, workers, threads in runs:
            with torch_threads(threads):
                scores = score_windows_fixed(encoder, tokenizer, pairs, 128, batch_size, workers)
            for i in (i for i, p in enumerate(pairs) if p == PAIR):
                assert np.array_equal(scores[i], alone), (batch_size, workers, threads)


def test_auto_picks_window_scales_where_amx_is_missing(wide, monkeypatch) -> None:
    model, tokenizer = wide
    int8 = quantize_model(model).eval()
    monkeypatch.delenv(infer.SCORING_ENV, raising=False)
    monkeypatch.setattr(infer, "amx_available", lambda: False)
    monkeypatch.setattr(infer.onnx_int8, "onnx_available", lambda: False)
    verifier = Verifier(int8, tokenizer, {"max_tokens": 128}, float_model=model)
    assert verifier.scoring == "window_scales" and verifier.bf16 is None
    assert verifier.provenance["scoring"] == "window_scales"
    assert Verifier(model, tokenizer, {}).scoring == "batched"  # a float model
    with pytest.raises(ConfigError, match="AMX"):
        Verifier(int8, tokenizer, {}, float_model=model, scoring="bf16")
    verifier.scoring = "bf16"  # set by hand where it cannot run: an error, never a fallback
    with pytest.raises(ConfigError, match="not available"):
        verifier.predict([PAIR])


def test_the_scoring_can_be_forced_and_is_checked(wide, monkeypatch) -> None:
    model, tokenizer = wide
    int8 = quantize_model(model).eval()
    monkeypatch.setenv(infer.SCORING_ENV, "window_scales")
    assert Verifier(int8, tokenizer, {}, float_model=model).scoring == "window_scales"
    monkeypatch.setenv(infer.SCORING_ENV, "per_window")
    assert Verifier(int8, tokenizer, {}, float_model=model).scoring == "per_window"
    monkeypatch.setenv(infer.SCORING_ENV, "fast")
    with pytest.raises(ConfigError, match="unknown verifier scoring 'fast'"):
        Verifier(int8, tokenizer, {}, float_model=model)
    monkeypatch.delenv(infer.SCORING_ENV)
    auto = Verifier(int8, tokenizer, {}, float_model=model)
    assert auto.scoring == "window_scales" and auto.bf16 is None  # bf16 is opt-in
    assert auto.scores_id == auto.id
    if amx_available():
        monkeypatch.setenv(infer.SCORING_ENV, "bf16")
        forced = Verifier(int8, tokenizer, {}, float_model=model)
        assert forced.scoring == "bf16" and forced.bf16 is not None
        assert forced.scores_id == f"{forced.id}+bf16"  # no int8-fitted calibration for it
    with pytest.raises(ConfigError, match="int8 model"):
        Verifier(model, tokenizer, {}, scoring="window_scales")
