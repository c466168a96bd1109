"""The knowledge base: load documents, chunk, embed, store, search.

>>> from medverify.kb import KnowledgeBase, iter_documents
>>> with KnowledgeBase.create("my-kb", embedder="hash") as kb:
...     kb.ingest(iter_documents(["docs/"]))
...     kb.search("metformin dose", k=7)
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from medverify.kb.chunking import Chunk, chunk_text
from medverify.kb.embed import EMBEDDERS, Embedder, HashEmbedder, Tokenizer, get_embedder
from medverify.kb.loaders import LoadReport, iter_documents
from medverify.kb.store import IngestStats, KBStats, KnowledgeBase, fts_query

__all__ = [
    "EMBEDDERS",
    "Chunk",
    "Embedder",
    "HashEmbedder",
    "IngestStats",
    "KBStats",
    "KnowledgeBase",
    "LoadReport",
    "Tokenizer",
    "chunk_text",
    "fts_query",
    "get_embedder",
    "iter_documents",
    "sample_kb_path",
]


def sample_kb_path() -> Path:
    """The shipped MedQuAD sample corpus (JSONL, about 300 documents; see ATTRIBUTION.md)."""
    return Path(str(resources.files("medverify") / "data" / "medquad_sample.jsonl"))
