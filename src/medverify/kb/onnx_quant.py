"""A cheaper query encoder measured for issue 45: the ONNX export of a mean-pooling
sentence-transformers model with SmoothQuant-style smoothing and ONNX Runtime's dynamic
int8 MatMuls (per-channel int8 weights, each activation quantised per tensor at run time).

Dynamic int8 of every MatMul is about 2.4x faster than fp32 for a query on this machine's
CPU (VNNI) but moves a query vector to a cosine of 0.986 (min; mean 0.994) from fp32's,
and its hybrid top 7 at 1M passages shares only 0.90 with fp32's. Per-tensor activation
scales are the loss: a few input channels of each Linear carry most of the range.
Smoothing moves that range into the weights (exact in fp32): each Linear ``y = x W^T + b``
becomes ``y = (x / s) (W diag(s))^T + b`` with, per input channel ``j``,
``s_j = max|x_j|^alpha / max|W_{:,j}|^(1 - alpha)`` (``max|x_j|`` over calibration
texts); ``x / s`` is one element-wise Mul in the graph (BERT is post-LayerNorm: the
LayerNorm's output is also the residual, so the scale cannot be folded into it).
Measured on 200 dev claims (benchmarks/results/query_path.md): alpha 0.8 with the FFN
down-projections (whose inputs come from GELU) kept fp32 gives a cosine of 0.9995 (mean)
to fp32 at 1.37x fp32's speed; alpha 0.9 with every MatMul int8 0.998 at 2.16x. Both keep
recall@5 on the dev claims within 0.005 of fp32, but at 1M passages their hybrid top 7
shares only 0.954 / 0.934 with fp32's (issue 45 asks 0.97; benchmarks/results/
search_e2e.md), so no setting uses this yet: it is what bench_query_path.py and
bench_search_e2e.py measure.

Queries only: documents keep the KB's recorded embedder (fp32); :func:`build` writes the
quantised file, :class:`medverify.kb.onnx_runtime.OnnxEncoder` runs it.
"""

from __future__ import annotations

import copy
import os
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ALPHA = 0.8  # the smoothing exponent measured best (0.5: cosine 0.986, 0.9: 0.998 all int8)
CALIBRATION_BATCH = 32


def ffn_down(name: str) -> bool:
    """BERT's FFN down-projection (``layer.N.output.dense``): its input comes from GELU."""
    return name.endswith("output.dense") and ".attention." not in name


def input_ranges(transformer: Any, batches: Sequence[tuple[np.ndarray, np.ndarray]]
                 ) -> dict[str, Any]:
    """Per input channel, the largest |activation| entering each Linear of ``transformer``
    over the calibration batches (token ids and masks; padding included, which only
    widens a range)."""
    import torch

    ranges: dict[str, Any] = {}

    def hook(name: str) -> Callable[..., None]:
        def record(_module: Any, inputs: Any, _output: Any) -> None:
            x = inputs[0].detach().abs().reshape(-1, inputs[0].shape[-1]).amax(0)
            ranges[name] = torch.maximum(ranges[name], x) if name in ranges else x
        return record

    handles = [module.register_forward_hook(hook(name))
               for name, module in transformer.named_modules()
               if isinstance(module, torch.nn.Linear)]
    try:
        with torch.no_grad():
            for ids, mask in batches:
                transformer(input_ids=torch.from_numpy(ids),
                            attention_mask=torch.from_numpy(mask))
    finally:
        for handle in handles:
            handle.remove()
    return ranges


def smoothed(model: Any, ranges: dict[str, Any], alpha: float = ALPHA) -> Any:
    """A copy of ``model`` whose Linears divide their input by ``s`` and carry ``W diag(s)``
    (the same function in exact arithmetic; see the module doc)."""
    import torch

    class Smoothed(torch.nn.Module):
        def __init__(self, linear: Any, scale: Any) -> None:
            super().__init__()
            self.inverse = torch.nn.Parameter(1 / scale, requires_grad=False)
            self.linear = torch.nn.Linear(linear.in_features, linear.out_features)
            self.linear.weight.data = linear.weight.data * scale[None, :]
            self.linear.bias.data = linear.bias.data.clone()

        def forward(self, x: Any) -> Any:
            return self.linear(x * self.inverse)

    out = copy.deepcopy(model)
    transformer = out[0].auto_model.eval()
    for name, linear in list(transformer.named_modules()):
        if not isinstance(linear, torch.nn.Linear) or name not in ranges:
            continue
        weight = linear.weight.detach().abs().amax(0).clamp(min=1e-5)
        scale = (ranges[name].clamp(min=1e-5) ** alpha / weight ** (1 - alpha)).clamp(min=1e-5)
        parent, _, attr = name.rpartition(".")
        setattr(transformer.get_submodule(parent), attr, Smoothed(linear, scale))
    return out


def quantize(source: Path, target: Path, keep_fp32: Callable[[str], bool] = ffn_down) -> None:
    """Dynamic int8 (per-channel weights) of the MatMuls of ``source`` whose module name
    ``keep_fp32`` rejects, written to ``target`` (via a temporary file)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(source), load_external_data=False).graph
    keep = [node.name for node in graph.node if node.op_type == "MatMul"
            and keep_fp32(_module_name(node.name))]
    handle, tmp = tempfile.mkstemp(dir=target.parent, suffix=".onnx.tmp")
    os.close(handle)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantize_dynamic(str(source), tmp, weight_type=QuantType.QInt8, per_channel=True,
                             op_types_to_quantize=["MatMul"], nodes_to_exclude=keep)
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _module_name(node: str) -> str:
    """``/transformer/encoder/layer.0/output/dense/linear/MatMul`` ->
    ``encoder.layer.0.output.dense`` (the Linear's name in the transformer)."""
    parts = [p for p in node.split("/") if p and p not in ("transformer", "linear", "MatMul")]
    return ".".join(parts)


def build(model: Any, target: Path, batches: Sequence[tuple[np.ndarray, np.ndarray]],
          alpha: float | None = ALPHA, keep_fp32: Callable[[str], bool] = ffn_down) -> Path:
    """The int8 query encoder of ``model`` at ``target``: calibrated on ``batches`` (token
    ids and masks of training-allowed texts), smoothed with ``alpha`` (None: not
    smoothed), exported, quantised."""
    from medverify.kb import onnx_runtime

    source = model
    if alpha is not None:
        source = smoothed(model, input_ranges(model[0].auto_model.eval(), batches), alpha)
    target.parent.mkdir(parents=True, exist_ok=True)
    fp32 = target.with_suffix(".fp32.onnx")
    onnx_runtime.export(source, fp32)
    try:
        quantize(fp32, target, keep_fp32)
    finally:
        fp32.unlink(missing_ok=True)
    return target
