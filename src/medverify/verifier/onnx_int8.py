"""The verifier scored one window per ONNX Runtime run with dynamic int8 MatMuls
("onnx_int8", issue 45): batch-independent by construction, on any x86 CPU with VNNI.

The cross-encoder (BERT, mean pooling, the 3-way head) is exported once with
``torch.onnx.export`` and every MatMul quantised by ONNX Runtime's dynamic quantisation
(:func:`medverify.kb.onnx_quant.quantize`): int8 weights with one scale per output channel,
activations quantised at run time over the whole input tensor. Each run holds exactly one
window (its real tokens, no padding), so a window's activation scales, and so its scores,
are its own whatever else is being scored; each session runs on one intra-op thread, and
windows are spread over :data:`WORKERS` threads (ONNX Runtime releases the GIL).

Against the same weights in float32 this arithmetic is closer than torch's per-tensor int8
("window_scales"): the label under the verifier's thresholds agreed with float32's on 0.947
against 0.860 of 150 HealthVer windows and 0.952 against 0.797 of 355 Check-COVID ones
(benchmarks/bench_verifier_fidelity.py, quiet), because each output channel keeps its own
weight scale and activations use all 8 bits.

The export is a pure function of the weights, torch and ONNX Runtime, so it is cached per
machine (:func:`cache_dir`), named by the weights' sha256 and both versions, written to a
temporary file and renamed (a killed export leaves nothing half-written); a cached file that
does not load is exported again.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from medverify.errors import ConfigError, MissingDependencyError
from medverify.verifier.quantized import tokenize_windows

WORKERS = 2  # threads running windows side by side, one intra-op thread each
CACHE_ENV = "MEDVERIFY_ONNX_CACHE"  # where exports are kept (default: the user's cache)
INPUTS = ("input_ids", "token_type_ids")
GRAPH = "unmasked"  # what the export's graph is, in its cache name (an older one is not read)


def onnx_available() -> bool:
    """Whether ONNX Runtime and the exporter's packages are importable."""
    try:
        import onnx  # type: ignore[import-untyped,import-not-found,unused-ignore]  # noqa: F401
        import onnxruntime  # type: ignore[import-untyped,import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


def cache_dir() -> Path:
    """The machine's ONNX export cache, shared with the KB's embedder export
    (:func:`medverify.kb.onnx_runtime.cache_dir`: ``$MEDVERIFY_ONNX_CACHE``, else
    ``$XDG_CACHE_HOME/medverify/onnx``)."""
    from medverify.kb import onnx_runtime

    return onnx_runtime.cache_dir()


def export_path(weights_sha256: str) -> Path:
    """The cached int8 export of the weights with this sha256 (for these library versions)."""
    from medverify.kb import onnx_runtime

    tag = onnx_runtime.versions_tag()
    return cache_dir() / f"verifier-{weights_sha256[:16]}-{tag}-int8-{GRAPH}.onnx"


def unmasked(model: Any) -> Any:
    """``model`` as the export runs it: a window's real tokens only, so no attention mask.

    A run never holds padding, so the cross-encoder's mask would be all ones: the masked
    attention and the masked mean pooling equal plain attention and a plain mean. Leaving
    the mask out of the graph drops its ops (9 ``Where``, ``IsNaN``, casts, the pooling's
    sums): logits bitwise the same on 150 HealthVer and 355 Check-COVID windows, each run
    1.105x and 1.203x faster (benchmarks/bench_verifier_onnx_unmasked.py;
    ``tests/verifier/test_verifier_onnx_int8.py`` checks it against the masked model)."""
    import torch

    class Unmasked(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
            hidden = self.model.encoder(input_ids=input_ids,
                                        token_type_ids=token_type_ids).last_hidden_state
            return self.model.head(hidden.mean(1))

    return Unmasked().eval()


def export_int8(model: Any, path: Path) -> None:
    """Export the float cross-encoder ``model`` and quantise its MatMuls to ``path``."""
    import torch

    from medverify.kb.onnx_quant import quantize

    path.parent.mkdir(parents=True, exist_ok=True)
    handle, fp32 = tempfile.mkstemp(dir=path.parent, suffix=".fp32.onnx.tmp")
    os.close(handle)
    ids = torch.tensor([[101, 7632, 102, 2088, 102]])
    try:
        # the TorchScript-based exporter (deprecated in favour of torch.export): its
        # warnings are expected here
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(unmasked(model.eval()), (ids, torch.zeros_like(ids)),
                              fp32, input_names=list(INPUTS), output_names=["logits"],
                              dynamic_axes={name: {0: "batch", 1: "tokens"} for name in INPUTS},
                              opset_version=17, dynamo=False)
        quantize(Path(fp32), path, keep_fp32=lambda _name: False)
    finally:
        Path(fp32).unlink(missing_ok=True)


class OnnxInt8Encoder:
    """ONNX Runtime scoring of windows, one window a run, on one intra-op thread."""

    def __init__(self, path: Path) -> None:
        from medverify.kb.onnx_runtime import cpu_session

        self.path = path
        self.session = cpu_session(path, 1)

    def window(self, ids: Sequence[int], types: Sequence[int]) -> np.ndarray:
        """The 3 probabilities of one window (its token ids and type ids)."""
        row = np.asarray(ids, dtype=np.int64)[None, :]
        feed = {"input_ids": row, "token_type_ids": np.asarray(types, dtype=np.int64)[None, :]}
        [logits] = self.session.run(None, feed)
        logits = np.asarray(logits, dtype=np.float64)[0]
        exp = np.exp(logits - logits.max())
        return (exp / exp.sum()).astype(np.float32)

    def score(self, tokenizer: Any, pairs: Sequence[tuple[str, str]], max_tokens: int,
              workers: int = WORKERS) -> np.ndarray:
        """(n, 3) float32 probabilities of already-windowed (claim, window) pairs."""
        if not pairs:
            return np.zeros((0, 3), dtype=np.float32)
        encoded = tokenize_windows(tokenizer, pairs, max_tokens)
        if workers > 1 and len(encoded) > 1:
            with ThreadPoolExecutor(workers) as pool:
                rows = list(pool.map(lambda e: self.window(*e), encoded))
        else:
            rows = [self.window(*e) for e in encoded]
        return np.stack(rows)


def load_encoder(model: Any, weights_sha256: str) -> OnnxInt8Encoder:
    """The int8 encoder of the float cross-encoder ``model`` (exported now unless cached)."""
    if not onnx_available():
        raise MissingDependencyError("onnxruntime", "onnx", problem=(
            'verifier scoring "onnx_int8" needs ONNX Runtime'))
    if not weights_sha256:
        raise ConfigError("verifier scoring \"onnx_int8\" needs the weights' sha256 "
                          "(verifier.json's weights_sha256) to name its cached export")
    from medverify.kb import onnx_runtime

    return onnx_runtime.load_or_export(export_path(weights_sha256), OnnxInt8Encoder,
                                       lambda path: export_int8(model, path), "the verifier")
