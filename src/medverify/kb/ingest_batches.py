"""What an ingest carries (:mod:`medverify.kb.ingest`): its counts (:class:`IngestStats`),
the documents being stored (:class:`Pending`), the batches of chunks embedded and committed
together (:class:`Batch`, :class:`InFlight` once handed to the embedder), and the content
hash that says whether a document changed (:func:`document_hash`; ``partial:`` marks one
whose chunks are not all stored yet).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel

from medverify.kb.chunking import Chunk
from medverify.kb.loaders import KBInput, TextFile

PARTIAL = "partial:"  # content_hash prefix of a document whose chunks are not all stored


class IngestStats(BaseModel):
    """What one ingest did."""

    documents_seen: int = 0
    documents_added: int = 0
    documents_updated: int = 0
    documents_unchanged: int = 0
    documents_empty: int = 0
    documents_resumed: int = 0
    chunks_added: int = 0
    seconds: float = 0.0


@dataclass
class Pending:
    """A document being stored: its row once inserted, chunks stored so far."""

    doc: KBInput
    digest: str
    replace: bool  # an older version (or an unmatched partial one) is deleted first
    row: int | None = None
    stored: int = 0
    done: bool = False
    resumed: bool = False


@dataclass
class Batch:
    """Chunks waiting to be embedded and committed together, and their documents."""

    docs: list[Pending] = field(default_factory=list)
    chunks: list[tuple[Pending, int, Chunk]] = field(default_factory=list)
    finished: set[int] = field(default_factory=set)  # id() of the docs this batch completes,
    # taken when it is handed over (the reader marks later documents done meanwhile)

    def completes(self, pending: Pending) -> bool:
        return id(pending) in self.finished

    def touch(self, pending: Pending) -> None:
        if not self.docs or self.docs[-1] is not pending:
            self.docs.append(pending)

    def add(self, pending: Pending, order: int, chunk: Chunk) -> None:
        self.touch(pending)
        self.chunks.append((pending, order, chunk))


def document_hash(doc: KBInput) -> str:
    """Content hash of what the KB stores for a document: ``content_hash`` of title, url,
    source and text joined by NULs, computed piece by piece (a :class:`TextFile` hashes to
    the hash of the Document it stands for)."""
    digest = hashlib.sha256("\x00".join([doc.title or "", doc.url or "", doc.source or "",
                                         ""]).encode("utf-8", "surrogatepass"))
    for piece in document_pieces(doc):
        digest.update(piece.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


def document_pieces(doc: KBInput, size: int = 1 << 20) -> Iterator[str]:
    """The document's text in consecutive pieces (slices of a Document's text)."""
    if isinstance(doc, TextFile):
        return doc.pieces()
    return (doc.text[i:i + size] for i in range(0, len(doc.text), size))


@dataclass
class InFlight:
    """A batch handed to the embedding thread, not stored yet."""

    batch: Batch
    vectors: list[Future[np.ndarray]] | list[Future[Sequence[np.ndarray]]]  # one per unit
