"""The knowledge base: load documents, chunk, embed, store; ranking is medverify.retrieve's.

>>> from medverify.kb import KnowledgeBase, iter_documents
>>> from medverify.retrieve import Retriever
>>> with KnowledgeBase.create("my-kb", embedder="hash") as kb:
...     kb.ingest(iter_documents(["docs/"]))
...     Retriever(kb).search("metformin dose", k=7)

KB stores are named in :data:`KB_STORES`: the built-in ``embedded`` store is the
SQLite + FTS5 + faiss directory (:class:`KnowledgeBase`); plugins add stores through the
``medverify.kb_stores`` entry-point group, each a factory ``factory(path, config)`` that
returns an open :class:`KBStore`. The ``postgresql`` store (:mod:`medverify.kb.postgres`)
is one KB in a database that several replicas share. :func:`open_store` opens the
configured one.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from medverify.errors import ConfigError
from medverify.kb.chunking import Chunk, chunk_text
from medverify.kb.embed import EMBEDDERS, Embedder, get_embedder
from medverify.kb.embed_base import HashEmbedder, Tokenizer
from medverify.kb.fts import fts_query
from medverify.kb.ingest_batches import IngestStats
from medverify.kb.loaders import LoadReport, iter_documents
from medverify.kb.protocol import KBStore, StoredChunk
from medverify.kb.store import KBStats, KnowledgeBase
from medverify.registry import Registry

if TYPE_CHECKING:
    from medverify.config import Config

__all__ = [
    "DEFAULT_STORE",
    "EMBEDDERS",
    "KB_STORES",
    "Chunk",
    "Embedder",
    "HashEmbedder",
    "IngestStats",
    "KBStats",
    "KBStore",
    "KnowledgeBase",
    "LoadReport",
    "StoredChunk",
    "Tokenizer",
    "chunk_text",
    "fts_query",
    "get_embedder",
    "iter_documents",
    "open_store",
    "sample_kb_path",
]

class KBStoreRegistry(Registry[KBStore]):
    """KB store factories by name, each called as ``factory(path, config)``."""

    def create(self, name: str, config: Config) -> KBStore:
        """The KB store ``name`` at ``config.kb``, opened with ``config``."""
        return self.build(name, config.kb, config)


KB_STORES = KBStoreRegistry("KB store", group="medverify.kb_stores")
"""KB stores by name: ``KB_STORES.create(name, config)``."""
KB_STORES.register("embedded", "medverify.kb.store:KnowledgeBase.from_config")
KB_STORES.register("postgresql", "medverify.kb.postgres:PostgresKB.from_config")

DEFAULT_STORE = "embedded"


def open_store(config: Config, name: str = DEFAULT_STORE) -> KBStore:
    """The KB store ``name`` at ``config.kb``, opened with ``config`` (ConfigError when no
    KB is configured or the name is unknown). Kept beside ``KB_STORES.create`` for what
    it adds: ``[kb_settings] location`` (a ``postgresql://`` URL) opens the ``postgresql``
    store there, and the error that says how to give a KB when none is configured."""
    location = config.kb_settings.location
    if location is not None and name == DEFAULT_STORE:
        return KB_STORES.build("postgresql", location, config)
    if config.kb is None:
        raise ConfigError(
            "no knowledge base given: pass --kb DIR (build one with "
            "`medverify kb ingest PATH --kb DIR`)"
        )
    return KB_STORES.create(name, config)


def sample_kb_path() -> Path:
    """The shipped MedQuAD sample corpus (JSONL, about 300 documents; see ATTRIBUTION.md)."""
    return Path(str(resources.files("medverify") / "data" / "medquad_sample.jsonl"))
