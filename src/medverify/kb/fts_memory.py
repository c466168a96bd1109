"""Posting lists read from FTS5's own index and held in memory, to rank a small KB's
lexical queries without ``bm25()``.

FTS5's ``bm25()`` costs about a microsecond per matching row and query term (a one-claim
query on the 1,306-chunk sample KB matches most of it: ~1.5 ms of the service's CPU per
answer, issue 45). :class:`MemoryPostings` reads a query token's posting list (chunk ids,
hits) once per KB generation from an ``fts5vocab`` instance table over ``chunks_fts``,
and every row's length from FTS5's ``%_docsize``: what the stored postings hold
(:mod:`medverify.kb.postings_build`), so :func:`medverify.kb.fts.rank_lexical` ranks them
with the same :class:`~medverify.kb.fts.Bm25Ranker`, to ``bm25()``'s scores and order.
One :class:`MemoryPostings` is kept per SQLite connection (:func:`held`: a connection takes
no attributes or weak references, so the last :data:`CONNECTIONS` used are held, closed
ones dropped). Everything read is checked against the KB's generation read before and
after it: a change committed meanwhile by another process drops what was read (that query
is ranked by ``bm25()``). This module imports nothing of the KB's (``fts`` imports it).
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

MEMORY_ROWS = 100_000
"""KBs of up to this many chunks (the last chunk id) rank from postings held in memory."""

MEMORY_POSTINGS = 1_000_000
"""Postings held at most per connection (8 bytes each): past it the lists are dropped, all."""

CONNECTIONS = 16
"""Connections whose postings are held (the least recently used beyond are dropped)."""

_VOCAB = "temp.medverify_fts_instances"
_GENERATION = "SELECT value FROM meta WHERE key = 'generation'"

Postings = tuple[np.ndarray, np.ndarray]
"""A token's (row ids ascending, hits in each row)."""


class MemoryPostings:
    """One KB connection's posting lists in memory at one generation (callers serialise:
    the KB's lock). ``ranker`` and ``stored`` are the caller's (``fts``): the ranker of
    the rows' lengths at the generation held, and what ranks phrases."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.generation: str | None = None
        self.ranker: Any = None
        self.stored: Any = None
        self._lists: dict[str, Postings | None] = {}
        self._held = 0
        self._vocab = False

    def now(self) -> str | None:
        """The KB's generation, read now."""
        row = self._conn.execute(_GENERATION).fetchone()
        return None if row is None else str(row[0])

    def lengths(self, generation: str | None) -> tuple[np.ndarray, int] | None:
        """Every row's length in tokens (by row id) and the rows, read at ``generation``
        (the KB's, just read), the lists held dropped; None for a KB past
        :data:`MEMORY_ROWS` chunks, without a generation, or changed meanwhile."""
        self.generation, self.ranker = None, None
        self._lists.clear()
        self._held = 0
        last = self._conn.execute("SELECT max(id) FROM chunks").fetchone()[0] or 0
        if generation is None or last > MEMORY_ROWS:
            return None
        found = np.zeros(last + 1, dtype=np.int64)
        rows = 0
        for rowid, sizes in self._conn.execute("SELECT id, sz FROM chunks_fts_docsize"):
            found[rowid] = sum(varints(sizes))
            rows += 1
        if rows == 0 or self.now() != generation:  # (an empty KB: bm25() finds nothing)
            return None
        self.generation = generation
        return found, rows

    def postings(self, token: str) -> Postings | bool | None:
        """``token``'s posting list at the generation held (None: no row holds it); False
        when the KB changed since (the query goes to ``bm25()``)."""
        if token in self._lists:
            return self._lists[token]
        if not self._vocab:
            self._conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {_VOCAB} USING "
                               "fts5vocab(main, chunks_fts, instance)")
            self._vocab = True
        rows = self._conn.execute(f"SELECT doc FROM {_VOCAB} WHERE term = ?",
                                  (token,)).fetchall()
        if self.now() != self.generation:
            self.generation, self.ranker = None, None
            return False
        found = _postings(rows)
        held = len(found[0]) if found is not None else 0
        if self._held + held > MEMORY_POSTINGS:
            self._lists.clear()
            self._held = 0
        self._lists[token] = found
        self._held += held
        return found


def _postings(rows: list[tuple[int]]) -> Postings | None:
    """(row ids, hits) of a token's instances (one row id per hit, ascending), as
    :mod:`medverify.kb.postings_build` stores them."""
    if not rows:
        return None
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    first = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    hits = np.diff(np.r_[first, len(ids)])
    return ids[first].astype(np.uint32), hits.astype(np.uint32)


def varints(blob: bytes) -> list[int]:
    """SQLite varints (big-endian 7-bit groups), as FTS5's ``%_docsize`` stores sizes
    (also what :mod:`medverify.kb.postings_build` reads them with)."""
    out, value = [], 0
    for byte in blob:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            out.append(value)
            value = 0
    return out


_held: OrderedDict[int, tuple[sqlite3.Connection, MemoryPostings]] = OrderedDict()
_held_lock = threading.Lock()


def held(conn: sqlite3.Connection) -> MemoryPostings:
    """``conn``'s :class:`MemoryPostings` (made on first use, then kept)."""
    with _held_lock:
        entry = _held.get(id(conn))
        if entry is not None and entry[0] is conn:
            _held.move_to_end(id(conn))
            return entry[1]
        for key, (other, _) in list(_held.items()):
            if not _open(other):
                del _held[key]
        _held[id(conn)] = (conn, MemoryPostings(conn))
        while len(_held) > CONNECTIONS:
            _held.popitem(last=False)
        return _held[id(conn)][1]


def _open(conn: sqlite3.Connection) -> bool:
    try:
        conn.total_changes  # noqa: B018 (raises once the connection is closed)
    except sqlite3.ProgrammingError:
        return False
    return True
