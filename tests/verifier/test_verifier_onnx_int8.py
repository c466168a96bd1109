"""Tests of the verifier scored by ONNX Runtime's dynamic int8, one window a run
("onnx_int8", issue 45), on a small random cross-encoder exported for real: close to the
float model, a window's probabilities bitwise the same alone and in any batch on one or two
workers, its own scores_id, a cached export reused and a damaged one replaced."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from medverify.errors import ConfigError
from medverify.verifier import infer, onnx_int8
from medverify.verifier.infer import Verifier, quantize_model, score_windows, torch_threads
from medverify.verifier.model import CrossEncoder, load_tokenizer

pytest.importorskip("onnxruntime")

PAIR = ("Vitamin D supplements prevent COVID-19 infection.",
        "In a randomised trial of 2,000 adults, vitamin D3 did not reduce the rate of "
        "SARS-CoV-2 infection over six months (3.2 % vs 3.0 % with placebo).")
OTHERS = [("Masks reduce transmission.", "Mask wearing was associated with 53 % fewer cases."),
          ("x", "y"), ("IL-6 >> 1000 pg/mL predicts death.", "IL-6 above 80 pg/mL. " * 9),
          *[(f"Drug {i} raises blood pressure.", "Drug 1 lowered it by 5 mmHg. " * i)
            for i in range(1, 6)]]
SHA = "ab" * 32


@pytest.fixture(scope="module")
def small():
    """A random two-layer, 64-wide cross-encoder (float) and the verifier's tokenizer."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=256, max_position_embeddings=128)
    model = CrossEncoder(BertModel(config, add_pooling_layer=False)).eval()
    with torch.no_grad():  # a wider head: the scores are not all alike
        model.head.weight.normal_(0, 2.0)
    return model, load_tokenizer()


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One export cache for the module's tests (an export takes seconds)."""
    return tmp_path_factory.mktemp("onnx")


@pytest.fixture
def cache(shared_cache, monkeypatch):
    monkeypatch.setenv(onnx_int8.CACHE_ENV, str(shared_cache))
    return shared_cache


def test_close_to_the_float_model_and_batch_independent(small, cache) -> None:
    model, tokenizer = small
    encoder = onnx_int8.load_encoder(model, SHA)
    pairs = [PAIR, *OTHERS]
    scores = encoder.score(tokenizer, pairs, 128)
    with torch_threads(1):
        float32 = score_windows(model, tokenizer, pairs, 128, 1)
    assert np.allclose(scores.sum(1), 1.0, atol=1e-5)
    assert np.abs(scores - float32).max() < 0.05
    assert not np.array_equal(scores, float32)  # it is int8 arithmetic, not float32
    alone = encoder.score(tokenizer, [PAIR], 128)[0]
    for batch, workers in (([*OTHERS[:3], PAIR, *OTHERS[3:]], 2), ([*OTHERS[::-1], PAIR], 1)):
        assert np.array_equal(encoder.score(tokenizer, batch, 128, workers)[batch.index(PAIR)],
                              alone)


def test_the_export_is_cached_and_a_damaged_one_replaced(small, tmp_path, monkeypatch) -> None:
    model, _ = small
    cache = tmp_path / "onnx"
    monkeypatch.setenv(onnx_int8.CACHE_ENV, str(cache))
    path = onnx_int8.load_encoder(model, SHA).path
    assert path.parent == cache and SHA[:16] in path.name and path.is_file()
    stamp = path.stat().st_mtime_ns
    assert onnx_int8.load_encoder(model, SHA).path.stat().st_mtime_ns == stamp  # reused
    path.write_bytes(b"not an onnx file")
    assert onnx_int8.load_encoder(model, SHA).path.stat().st_size > 1000  # exported again
    assert not list(cache.glob("*.tmp"))  # no temporary file left behind


def test_the_verifier_mode_has_its_own_scores_id(small, cache) -> None:
    model, tokenizer = small
    meta = {"weights_sha256": SHA}
    verifier = Verifier(quantize_model(model), tokenizer, meta, float_model=model,
                        scoring="onnx_int8")
    assert verifier.scoring == "onnx_int8" and verifier.onnx is not None
    assert verifier.scores_id == verifier.id + "+onnx-int8"
    assert verifier.provenance == {"verifier": verifier.id, "scoring": "onnx_int8"}
    probs = verifier.predict([PAIR, OTHERS[0]])
    assert probs.shape == (2, 3) and np.allclose(probs.sum(1), 1.0, atol=1e-5)
    window_scales = Verifier(quantize_model(model), tokenizer, meta, scoring="window_scales")
    assert window_scales.scores_id == window_scales.id


def test_onnx_int8_needs_onnxruntime_the_float_weights_and_their_hash(small, monkeypatch
                                                                      ) -> None:
    model, tokenizer = small
    with pytest.raises(ConfigError, match="sha256"):  # nothing to name the cached file by
        onnx_int8.load_encoder(model, "")
    with pytest.raises(ConfigError, match="sha256"):
        Verifier(quantize_model(model), tokenizer, {}, float_model=model, scoring="onnx_int8")
    assert Verifier(quantize_model(model), tokenizer, {}, float_model=model).scoring == (
        "window_scales")  # auto without a hash to name the export by
    with pytest.raises(ConfigError, match="needs ONNX Runtime"):  # an int8 model alone
        Verifier(quantize_model(model), tokenizer, {"weights_sha256": SHA}, scoring="onnx_int8")
    monkeypatch.setattr(onnx_int8, "onnx_available", lambda: False)
    with pytest.raises(ConfigError, match="needs ONNX Runtime"):
        Verifier(model, tokenizer, {"weights_sha256": SHA}, scoring="onnx_int8")
    assert infer.resolve_scoring("auto", int8=True, bf16=False, onnx=False) == "window_scales"
    assert Verifier(quantize_model(model), tokenizer, {"weights_sha256": SHA},
                    float_model=model).scoring == "window_scales"  # auto without ONNX Runtime


def test_the_export_has_no_mask_and_scores_as_the_masked_model(small, cache) -> None:
    """A run holds one window's real tokens, so the graph drops the attention mask: the
    unmasked forward equals the masked one on unpadded input, and the export takes no mask."""
    import onnx

    model, _tokenizer = small
    ids = torch.tensor([[101, 2000, 2001, 102, 3000, 3001, 3002, 102]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])
    with torch.no_grad():
        masked = model(ids, torch.ones_like(ids), types)
        plain = onnx_int8.unmasked(model)(ids, types)
    torch.testing.assert_close(plain, masked, rtol=0, atol=1e-6)
    onnx_int8.load_encoder(model, SHA)
    graph = onnx.load(str(onnx_int8.export_path(SHA))).graph
    assert [i.name for i in graph.input] == list(onnx_int8.INPUTS)
    assert "attention_mask" not in {i.name for i in graph.input}
    assert onnx_int8.GRAPH in onnx_int8.export_path(SHA).name
