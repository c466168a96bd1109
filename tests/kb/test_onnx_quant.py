"""The SmoothQuant-style int8 query encoder (medverify.kb.onnx_quant): smoothing leaves the
function unchanged in fp32, the ranges are per input channel, the FFN down-projections
are the ones kept fp32, and the int8 file stays close to fp32."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from medverify.kb import onnx_quant


def test_module_names_of_exported_matmuls() -> None:
    name = onnx_quant._module_name
    assert name("/transformer/encoder/layer.0/output/dense/linear/MatMul") == \
        "encoder.layer.0.output.dense"
    assert name("/transformer/encoder/layer.3/attention/output/dense/MatMul") == \
        "encoder.layer.3.attention.output.dense"
    assert onnx_quant.ffn_down("encoder.layer.0.output.dense")
    assert not onnx_quant.ffn_down("encoder.layer.0.attention.output.dense")
    assert not onnx_quant.ffn_down("encoder.layer.0.intermediate.dense")


def _tiny_model() -> list[SimpleNamespace]:
    """A sentence-transformers-like pair: a tiny random BERT and a mean pooling."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    # a vocabulary above 7632: the export traces ids 101, 7632, 2088, 102
    config = transformers.BertConfig(vocab_size=8000, hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=32)
    pooling = SimpleNamespace(get_config_dict=lambda: {"pooling_mode": "mean"})
    return [SimpleNamespace(auto_model=transformers.BertModel(config,
                                                              add_pooling_layer=False)),
            pooling]


BATCHES = [(np.array([[1, 5, 9, 2, 0], [1, 7, 2, 0, 0]], dtype=np.int64),
            np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], dtype=np.int64))]


@pytest.mark.slow  # importing transformers: ~20 s on a loaded 2-core machine
def test_smoothing_keeps_the_function_and_moves_range_into_weights() -> None:
    import torch

    model = _tiny_model()
    transformer = model[0].auto_model.eval()
    ranges = onnx_quant.input_ranges(transformer, BATCHES)
    linears = [n for n, m in transformer.named_modules() if isinstance(m, torch.nn.Linear)]
    assert sorted(ranges) == sorted(linears) and len(linears) == 12
    assert all(r.shape == (16,) or r.shape == (32,) for r in ranges.values())
    smoothed = onnx_quant.smoothed(model, ranges, alpha=0.8)
    ids, mask = (torch.from_numpy(a) for a in BATCHES[0])
    with torch.no_grad():
        before = transformer(input_ids=ids, attention_mask=mask).last_hidden_state
        after = smoothed[0].auto_model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.allclose(before, after, atol=1e-5)
    # each smoothed input's largest channel range is now alpha-balanced with the weights
    name = "encoder.layer.0.intermediate.dense"
    inner = smoothed[0].auto_model.get_submodule(name)
    scaled = ranges[name] * inner.inverse
    assert float(scaled.max() / scaled.min()) < float(ranges[name].max() / ranges[name].min())


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None,
                    reason="onnxruntime is not installed")
def test_the_int8_file_keeps_ffn_down_fp32_and_stays_close(tmp_path: Path) -> None:
    import onnx
    import onnxruntime
    import torch

    model = _tiny_model()
    model[0].auto_model.eval()
    target = onnx_quant.build(model, tmp_path / "q.onnx", BATCHES * 4)
    ops = [(n.op_type, n.name) for n in onnx.load(str(target)).graph.node]
    fp32 = [name for op, name in ops if op == "MatMul" and "dense" in name]
    assert len(fp32) == 2 and all("/output/dense" in n and "attention" not in n for n in fp32)
    assert sum(op == "DynamicQuantizeMatMul" or op == "MatMulInteger" for op, _ in ops) >= 10
    session = onnxruntime.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    ids, mask = BATCHES[0]
    [got] = session.run(None, {"ids": ids, "mask": mask})
    with torch.no_grad():
        hidden = model[0].auto_model(input_ids=torch.from_numpy(ids),
                                     attention_mask=torch.from_numpy(mask)).last_hidden_state
    weights = torch.from_numpy(mask).unsqueeze(-1).float()
    want = torch.nn.functional.normalize((hidden * weights).sum(1) / weights.sum(1), dim=1)
    assert (np.sum(got * want.numpy(), axis=1) > 0.98).all()
