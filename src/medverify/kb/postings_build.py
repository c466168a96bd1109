"""Building the stored postings of a KB (:mod:`medverify.kb.fts` ranks lexical queries from
them): every FTS5 token's posting list (chunk ids, hits) and every row's length, read from
FTS5's own vocabulary and ``%_docsize`` tables and recorded at one KB generation; and
dropping them.
"""

from __future__ import annotations

import itertools
import sqlite3

import numpy as np

from medverify.kb.fts import (
    DOC_DTYPE,
    LEN_DTYPE,
    POSTINGS_GENERATION,
    POSTINGS_ROWS,
    POSTINGS_SCHEMA,
    POSTINGS_TOKENS,
    TF_DTYPE,
)
from medverify.kb.fts_memory import varints


def build_postings(conn: sqlite3.Connection, generation: int) -> dict[str, int]:
    """Write the posting lists of every FTS5 token of ``chunks_fts`` and every row's length
    into the side tables, recorded at ``generation``; the caller holds the write lock
    (``BEGIN IMMEDIATE``) so that the FTS5 index cannot change meanwhile. Reads FTS5's own
    vocabulary (fts5vocab ``row`` and ``instance``) and ``%_docsize`` table."""
    # (one statement at a time: executescript() would commit the caller's transaction)
    conn.execute("DROP TABLE IF EXISTS temp.lexical_inst")
    conn.execute("DROP TABLE IF EXISTS temp.lexical_row")
    conn.execute("CREATE VIRTUAL TABLE temp.lexical_inst USING fts5vocab(main, chunks_fts, "
                 "instance)")
    conn.execute("CREATE VIRTUAL TABLE temp.lexical_row USING fts5vocab(main, chunks_fts, row)")
    for statement in POSTINGS_SCHEMA.strip().split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute("DELETE FROM lexical_postings")
    conn.execute("DELETE FROM lexical_lengths")
    lengths, rows = _row_lengths(conn)
    total = int(lengths.sum())
    conn.execute("INSERT INTO lexical_lengths (id, lens) VALUES (0, ?)",
                 (lengths.astype(LEN_DTYPE).tobytes(),))
    vocab = conn.execute("SELECT term, doc, cnt FROM temp.lexical_row").fetchall()
    instances = conn.execute("SELECT doc FROM temp.lexical_inst")  # term by term, same order
    postings = _write_postings(conn, vocab, instances)
    if next(iter(instances), None) is not None:
        raise RuntimeError("the FTS5 instances outnumber its vocabulary")
    if int(lengths.max(initial=0)) >= 2**32:
        raise RuntimeError("a row of 2**32 tokens or more")
    conn.execute("DROP TABLE temp.lexical_inst")
    conn.execute("DROP TABLE temp.lexical_row")
    conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                     [(POSTINGS_GENERATION, str(generation)), (POSTINGS_ROWS, str(rows)),
                      (POSTINGS_TOKENS, str(total))])
    return {"terms": len(vocab), "postings": postings, "rows": rows, "tokens": total}


def _row_lengths(conn: sqlite3.Connection) -> tuple[np.ndarray, int]:
    """Every FTS5 row's length in tokens (indexed by row id) and the number of rows."""
    last = int(conn.execute("SELECT max(id) FROM chunks_fts_docsize").fetchone()[0] or 0)
    if last >= 2**32:
        raise RuntimeError("row ids past 2**32: no stored postings (bm25() ranks)")
    lengths = np.zeros(last + 1, dtype=np.int64)
    rows = 0
    for rowid, sizes in conn.execute("SELECT id, sz FROM chunks_fts_docsize"):
        lengths[rowid] = sum(varints(sizes))
        rows += 1
    return lengths, rows


def _write_postings(conn: sqlite3.Connection, vocab: list[tuple[str, int, int]],
                    instances: sqlite3.Cursor) -> int:
    """Insert each vocabulary term's posting list (row ids, hits), reading its instances
    (row ids, term by term in the vocabulary's order) in batches; returns the postings."""
    postings = 0
    at = 0
    while at < len(vocab):
        batch, count = [], 0
        while at < len(vocab) and (not batch or count + vocab[at][2] <= 2_000_000):
            batch.append(vocab[at])
            count += vocab[at][2]
            at += 1
        docs = np.fromiter((r[0] for r in itertools.islice(instances, count)),
                           dtype=np.int64, count=count)
        out, start = [], 0
        for term, n_docs, n_inst in batch:
            ids = docs[start:start + n_inst]
            start += n_inst
            first = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
            if len(first) != n_docs or (len(ids) > 1 and bool(np.any(np.diff(ids) < 0))):
                raise RuntimeError(f"the FTS5 vocabulary of {term!r} is not in step with "
                                   "its instances")
            tfs = np.diff(np.r_[first, len(ids)])
            if len(tfs) and int(tfs.max()) >= 2**16:
                raise RuntimeError(f"{term!r} occurs 65,536 times or more in one row")
            out.append((term, ids[first].astype(DOC_DTYPE).tobytes(),
                        tfs.astype(TF_DTYPE).tobytes()))
            postings += n_docs
        conn.executemany("INSERT INTO lexical_postings (term, docs, tfs) VALUES (?, ?, ?)",
                         out)
    return postings


def drop_postings(conn: sqlite3.Connection) -> None:
    """Remove the side tables and their meta keys (the caller commits)."""
    conn.execute("DROP TABLE IF EXISTS lexical_postings")
    conn.execute("DROP TABLE IF EXISTS lexical_lengths")
    conn.execute("DELETE FROM meta WHERE key IN (?, ?, ?)",
                 (POSTINGS_GENERATION, POSTINGS_ROWS, POSTINGS_TOKENS))
