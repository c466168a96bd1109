"""A sentence-transformers encoder (mean pooling) run by ONNX Runtime on the CPU, in fp32.

MiniLM's forward pass is compute-bound on a CPU thread; ONNX Runtime's fused kernels run
it about twice as fast as torch for a single query (benchmarks/results/query_embedding.md),
with the same vectors (cosine to torch >= 0.99999, checked on every load). Opt-in:
``[kb_settings] embed_runtime = "onnx"`` and ``pip install 'medverify[onnx]'``.

The model is exported once per model directory and library versions with
``torch.onnx.export`` into the machine's export cache (:func:`cache_dir`, shared with the
verifier's int8 export: an export is a pure function of the model's files, torch and ONNX
Runtime, so every KB and every ``MEDVERIFY_HOME`` of the user reuses it), named
``embedder-<directory>-<hash of the model's files>-<both versions>.onnx``, so a changed
model or library is exported again. It is written to a temporary file, then renamed: a
killed export leaves nothing half-written, and processes exporting side by side each rename
a whole file. A cached file that does not load
is exported again; a model whose pooling is not the mean of token embeddings is refused (the
export reproduces mean pooling only).

Also what ``embed_runtime = "auto"`` runs queries on where the CPU has no AMX
(:class:`medverify.kb.sentence_embed.SentenceTransformerEmbedder`): the same export, checked
the same way, falling back to torch instead of failing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from medverify.errors import ConfigError, KBError, MissingDependencyError

log = logging.getLogger(__name__)
T = TypeVar("T")

CHECK_COSINE = 0.99999  # an exported model must give torch's vectors (measured: 0.9999997)
PROBE = ("Metformin is a first-line treatment for type 2 diabetes; the usual starting dose "
         "is 500 mg once or twice daily with meals.")


def _import_ort() -> Any:
    try:
        import onnxruntime  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError as exc:
        raise MissingDependencyError("onnxruntime", "onnx", problem=(
            'embed_runtime = "onnx" needs ONNX Runtime')) from exc
    return onnxruntime


def model_digest(model_dir: Path) -> str:
    """A hash of the model directory's files (names, sizes, modification times)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(model_dir)}|{stat.st_size}|{stat.st_mtime_ns}\n"
                      .encode())
    return digest.hexdigest()[:16]


CACHE_ENV = "MEDVERIFY_ONNX_CACHE"  # where exports are kept (default: the user's cache)


def cache_dir() -> Path:
    """The machine's ONNX export cache: ``$MEDVERIFY_ONNX_CACHE``, else
    ``$XDG_CACHE_HOME/medverify/onnx`` (``~/.cache``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "medverify" / "onnx"


def versions_tag() -> str:
    """torch's and ONNX Runtime's versions, as part of an export's file name."""
    import torch

    return f"{torch.__version__}-ort{_import_ort().__version__}".replace("+", "_")


def export_path(model_dir: Path) -> Path:
    """The cached fp32 export of the model in ``model_dir`` (for these library versions)."""
    name = f"embedder-{model_dir.name}-{model_digest(model_dir)}-{versions_tag()}.onnx"
    return cache_dir() / name


def mean_pooling_refusal(model: Any) -> str | None:
    """Why ``model``'s pooling is not the mean of its token embeddings; None when it is
    (what the ONNX export and the bfloat16 encoder reproduce)."""
    modules = list(model)
    pooling = modules[1] if len(modules) > 1 else None
    config = getattr(pooling, "get_config_dict", lambda: {})()
    modes = {key: value for key, value in config.items() if key.startswith("pooling_mode")}
    if modes.get("pooling_mode") == "mean":  # sentence-transformers 5: one mode by name
        return None
    if not modes.get("pooling_mode_mean_tokens") or any(
            value for key, value in modes.items() if key != "pooling_mode_mean_tokens"):
        return f"pooling is not the mean of tokens ({modes or type(pooling).__name__})"
    return None


def _check_mean_pooling(model: Any) -> None:
    refusal = mean_pooling_refusal(model)
    if refusal is not None:
        raise ConfigError("embed_runtime = \"onnx\" supports models with mean pooling only "
                          f"({refusal}); use the torch runtime")


def export(model: Any, path: Path) -> None:
    """Export the transformer + mean pooling + L2 normalisation of ``model`` to ``path``."""
    import torch

    _check_mean_pooling(model)
    transformer = model[0].auto_model.eval()

    class MeanPooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, ids: Any, mask: Any) -> Any:
            hidden = self.transformer(input_ids=ids, attention_mask=mask).last_hidden_state
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, dim=1)

    path.parent.mkdir(parents=True, exist_ok=True)
    ids = torch.tensor([[101, 7632, 2088, 102]])
    handle, tmp = tempfile.mkstemp(dir=path.parent, suffix=".onnx.tmp")
    os.close(handle)
    try:
        # torch's TorchScript-based exporter (deprecated in favour of torch.export, which
        # needs more of the model to be traceable): its warnings are expected here
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(MeanPooled().eval(), (ids, torch.ones_like(ids)), tmp,
                              input_names=["ids", "mask"], output_names=["vectors"],
                              dynamic_axes={"ids": {0: "batch", 1: "tokens"},
                                            "mask": {0: "batch", 1: "tokens"}},
                              opset_version=17, dynamo=False)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def cpu_session(path: Path, threads: int) -> Any:
    """An ONNX Runtime session of the model at ``path`` on the CPU, on ``threads`` intra-op
    threads, all graph optimisations on."""
    ort = _import_ort()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # no busy-waiting between runs: idle spinning threads steal the core that the next
    # query (or the rest of the process) needs
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class OnnxEncoder:
    """ONNX Runtime sessions of one exported model, one per thread count (a single query
    runs on one thread, as the torch path does)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        _import_ort()  # (a clear error when ONNX Runtime is missing)
        self._sessions: dict[int, Any] = {}
        self._lock = threading.Lock()
        self.session(1)  # raises on a file ONNX Runtime cannot load

    def session(self, threads: int) -> Any:
        with self._lock:
            session = self._sessions.get(threads)
            if session is None:
                session = self._sessions[threads] = cpu_session(self.path, threads)
            return session

    def run(self, ids: np.ndarray, mask: np.ndarray, threads: int) -> np.ndarray:
        [vectors] = self.session(threads).run(None, {"ids": ids, "mask": mask})
        return np.asarray(vectors, dtype=np.float32)


def load_or_export(path: Path, load: Callable[[Path], T], export: Callable[[Path], None],
                   what: str) -> T:
    """``load(path)`` of a cached export, exported first by ``export(path)`` when the file
    is missing or does not load (a damaged file is exported again)."""
    if path.is_file():
        try:
            return load(path)
        except Exception as exc:  # a damaged file: export it again
            log.warning("%s does not load (%s): exporting %s again", path, exc, what)
    log.info("exporting %s to ONNX at %s (once per machine)", what, path)
    export(path)
    return load(path)


def load_encoder(model: Any, model_dir: Path) -> OnnxEncoder:
    """The exported encoder of ``model`` (exported now unless cached and loadable)."""
    _import_ort()
    _check_mean_pooling(model)

    def exported(path: Path) -> None:
        try:
            export(model, path)
        except ConfigError:
            raise
        except Exception as exc:
            raise KBError(f"could not export {model_dir} to ONNX ({type(exc).__name__}: "
                          f"{exc}); use embed_runtime = \"torch\"") from exc

    return load_or_export(export_path(model_dir), OnnxEncoder, exported, "the model")
