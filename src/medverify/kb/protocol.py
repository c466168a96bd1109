"""What a KB store provides: storage and indexes, no ranking.

A store holds chunks and answers the primitive searches a :class:`medverify.retrieve.
Retriever` combines: lexical candidates with their BM25 scores, dense candidates with their
similarities, and the stored chunks of given ids. The built-in store is the embedded
directory (:class:`medverify.kb.store.KnowledgeBase`); others are added through the
``medverify.kb_stores`` entry-point group (see :data:`medverify.kb.KB_STORES`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, NamedTuple, Protocol, runtime_checkable

from medverify.config import RetrievalSettings

Candidate = tuple[int, float]
"""(chunk id, score): a BM25 score (higher is better) or a vector similarity."""


class Subset(NamedTuple):
    """Chunks selected by document metadata, with their stored vectors (row per chunk):
    what :meth:`medverify.retrieve.Retriever.search_many` ranks when given ``where``."""

    chunks: list[StoredChunk]
    vectors: Any  # numpy float32 array, (len(chunks), dim)


class StoredChunk(NamedTuple):
    """A stored chunk with its document's identity, as a store hands it out."""

    id: int
    order: int
    text: str
    start: int
    end: int
    doc_id: str
    title: str | None
    url: str | None
    source: str | None


@runtime_checkable
class KBStore(Protocol):
    """The storage side of a knowledge base, as the retrieval stage and the flows use it."""

    retrieval: RetrievalSettings  # the settings it was opened with (a Retriever's default)

    @property
    def snapshot_id(self) -> str:
        """Changes whenever the stored content changes."""
        ...

    def reading(self) -> AbstractContextManager[None]:
        """Hold the store for a consistent series of reads (primitives may nest it)."""
        ...

    def lexical_candidates(self, query: str, depth: int) -> list[Candidate]:
        """Up to ``depth`` chunks matching the query's terms, best BM25 score first."""
        ...

    def dense_candidates(self, queries: Sequence[str], depth: int) -> list[list[Candidate]]:
        """Per query, up to ``depth`` chunks nearest its embedding, most similar first
        (the queries are embedded in one batch)."""
        ...

    def chunks(self, ids: Sequence[int]) -> dict[int, StoredChunk]:
        """The stored chunks of ``ids`` by id (ids not stored are left out)."""
        ...

    def close(self) -> None: ...
