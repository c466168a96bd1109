"""Full-text query text for the FTS5 table: terms of untrusted text, made inert.

What goes into a ``chunks_fts MATCH`` expression, and the words counted per chunk in the
``terms`` table (whose document frequencies let a query on a large KB skip very common
words). The bm25 scores come from SQLite's FTS5, or on a large KB with fresh stored
postings from the same formula computed here in numpy (:class:`Bm25Ranker`; see
``KnowledgeBase.lexical_candidates``).
"""

from __future__ import annotations

import itertools
import math
import re
import sqlite3
import threading
from collections.abc import Sequence

import numpy as np

MAX_QUERY_TERMS = 32
LEXICAL_BUDGET = 5000  # postings a lexical query may touch before common terms are dropped

# Very common English words: dropped from lexical queries (they match nearly every chunk
# and only cost time); kept when a query has nothing else.
_STOPWORD_TEXT = """
a an and are as at be been but by can could did do does for from had has have how i if in
into is it its may might of on or should so than that the their them then there these they
this those to was were what when where which while who whom why will with would you your
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_WORD = re.compile(r"\w+", re.UNICODE)


def query_terms(text: str) -> list[str]:
    """Lower-cased word terms of a query, deduplicated, stopwords dropped (unless that
    leaves nothing)."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))
    return ([w for w in words if w not in STOPWORDS] or words)[:MAX_QUERY_TERMS]


def fts_match(terms: Sequence[str]) -> str | None:
    """An FTS5 MATCH expression: each term double-quoted, joined by OR.

    Terms are runs of word characters, so once quoted nothing in them can act as FTS5
    syntax: operators (AND, OR, NOT, NEAR), column filters, ``*``, ``^`` and quotes in
    untrusted text are inert. None when there are no terms.
    """
    return " OR ".join(f'"{t}"' for t in terms) or None


def fts_query(text: str) -> str | None:
    """The MATCH expression for untrusted query text (see :func:`fts_match`)."""
    return fts_match(query_terms(text))


def select_terms(terms: Sequence[str], df: dict[str, int], budget: int) -> list[str]:
    """The rarest terms whose summed document frequency fits ``budget`` (at least one).

    bm25 work grows with the rows a query matches, and very common words match most rows
    while adding almost nothing to the score (their idf is near zero), so on large KBs
    they are dropped first. On small KBs everything fits and the query is exact.
    """
    ranked = sorted(terms, key=lambda t: df.get(t, 0))
    chosen, spent = [], 0
    for term in ranked:
        cost = df.get(term, 0)
        if chosen and spent + cost > budget:
            break
        chosen.append(term)
        spent += cost
    return [t for t in terms if t in set(chosen)]


def chunk_terms(title: str | None, text: str) -> set[str]:
    """The words a chunk counts in the ``terms`` table (its title's and its text's)."""
    return {w.lower() for w in _WORD.findall(f"{title or ''} {text}")}


# ---- stored postings: FTS5's bm25() computed in numpy -------------------------------------
#
# FTS5's bm25() costs tens of microseconds per matching row (docs/scale.md), so on a large
# KB a lexical query is ranked from a side table of posting lists instead: for each FTS5
# token, the chunk ids holding it and how often (title and body together), plus every
# chunk's length in tokens. The score is FTS5's own formula, computed with the same double
# operations in the same order, so the ranking and the scores equal bm25()'s (ties broken
# by chunk id, as the bm25() query orders them). The table is valid only at the KB
# generation it was built at (meta POSTINGS_GENERATION); a stale or absent one is never read.

BM25_K1, BM25_B = 1.2, 0.75  # FTS5's constants (fts5_aux.c)
POSTINGS_GENERATION = "lexical_postings_generation"  # meta: the generation it was built at
POSTINGS_ROWS = "lexical_postings_rows"  # meta: FTS5 rows (N of the idf) at that generation
POSTINGS_TOKENS = "lexical_postings_tokens"  # meta: total tokens over all rows and columns
POSTINGS_SCHEMA = """
CREATE TABLE IF NOT EXISTS lexical_postings (
    term TEXT PRIMARY KEY, docs BLOB NOT NULL, tfs BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lexical_lengths (id INTEGER PRIMARY KEY, lens BLOB NOT NULL);
"""
DOC_DTYPE, TF_DTYPE, LEN_DTYPE = "<u4", "<u2", "<u4"  # as stored (6 bytes a posting)
_TOKENIZE = re.compile(r"tokenize\s*=\s*'([^']*)'", re.IGNORECASE)
_DEFAULT_TOKENIZE = "porter unicode61 remove_diacritics 2"


def tokenizer_spec(conn: sqlite3.Connection) -> str:
    """The ``tokenize`` option the KB's ``chunks_fts`` table was created with."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_fts'").fetchone()
    found = _TOKENIZE.search(row[0]) if row and row[0] else None
    return found.group(1) if found else _DEFAULT_TOKENIZE


class FtsTokenizer:
    """Query words as FTS5 tokenizes them (stemmed, folded), by the real FTS5 tokenizer:
    an in-memory FTS5 table with the KB's tokenize option; results are cached."""

    def __init__(self, spec: str, cache_size: int = 100_000) -> None:
        self._conn = sqlite3.connect(":memory:", isolation_level=None,
                                     check_same_thread=False)
        spec = spec.replace("'", "''")
        self._conn.execute(f"CREATE VIRTUAL TABLE words USING fts5(x, tokenize = '{spec}')")
        self._conn.execute("CREATE VIRTUAL TABLE words_v USING fts5vocab(words, instance)")
        self._cache: dict[str, tuple[str, ...]] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def tokens(self, words: Sequence[str]) -> list[tuple[str, ...]]:
        with self._lock:
            missing = [w for w in dict.fromkeys(words) if w not in self._cache]
            if missing:
                if len(self._cache) + len(missing) > self._cache_size:
                    self._cache.clear()
                self._conn.executemany("INSERT INTO words (rowid, x) VALUES (?, ?)",
                                       list(enumerate(missing, 1)))
                found: dict[int, list[tuple[int, str]]] = {}
                for term, doc, offset in self._conn.execute(
                        "SELECT term, doc, offset FROM words_v"):
                    found.setdefault(doc, []).append((offset, term))
                self._conn.execute("DELETE FROM words")
                for i, word in enumerate(missing, 1):
                    self._cache[word] = tuple(t for _, t in sorted(found.get(i, [])))
            return [self._cache[w] for w in words]


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
    last = int(conn.execute("SELECT max(id) FROM chunks_fts_docsize").fetchone()[0] or 0)
    if last >= 2**32:
        raise RuntimeError("row ids past 2**32: no stored postings (bm25() ranks)")
    lengths = np.zeros(last + 1, dtype=np.int64)
    rows = 0
    for rowid, sizes in conn.execute("SELECT id, sz FROM chunks_fts_docsize"):
        lengths[rowid] = sum(_varints(sizes))
        rows += 1
    total = int(lengths.sum())
    conn.execute("INSERT INTO lexical_lengths (id, lens) VALUES (0, ?)",
                 (lengths.astype(LEN_DTYPE).tobytes(),))
    vocab = conn.execute("SELECT term, doc, cnt FROM temp.lexical_row").fetchall()
    instances = conn.execute("SELECT doc FROM temp.lexical_inst")  # term by term, same order
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


def drop_postings(conn: sqlite3.Connection) -> None:
    """Remove the side tables and their meta keys (the caller commits)."""
    conn.execute("DROP TABLE IF EXISTS lexical_postings")
    conn.execute("DROP TABLE IF EXISTS lexical_lengths")
    conn.execute("DELETE FROM meta WHERE key IN (?, ?, ?)",
                 (POSTINGS_GENERATION, POSTINGS_ROWS, POSTINGS_TOKENS))


def _varints(blob: bytes) -> list[int]:
    """SQLite varints (big-endian 7-bit groups), as FTS5's ``%_docsize`` stores sizes."""
    out, value = [], 0
    for byte in blob:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            out.append(value)
            value = 0
    return out


def length_norms(lengths: np.ndarray, avgdl: float) -> np.ndarray:
    """Per row, bm25's length term ``k1 * (1 - b + b * D / avgdl)``, as fts5_aux.c computes
    it (the same double operations, in the same order)."""
    k1, b = BM25_K1, BM25_B
    return k1 * (1 - b + b * lengths.astype(np.float64) / avgdl)


class Bm25Ranker:
    """FTS5's bm25 over stored posting lists, for one KB generation: the rows' length terms,
    and a score per row reused by every query (cleared after each; callers serialise)."""

    def __init__(self, rows: int, lengths: np.ndarray, avgdl: float) -> None:
        self.rows = rows
        self.norms = length_norms(lengths, avgdl)
        self._scores = np.zeros(len(lengths), dtype=np.float64)

    def top(self, phrases: Sequence[tuple[np.ndarray, np.ndarray]],
            depth: int) -> list[tuple[int, float]]:
        """The best ``depth`` (row id, score) over ``phrases`` (each phrase's matching row
        ids, ascending, and its hits in each, integers; or, floats, the phrase's share of
        each row's score, already computed), best first, ties by row id: FTS5's bm25()
        negated (higher is better). As fts5_aux.c: per phrase, idf = ln((N - n + 0.5) /
        (n + 0.5)) floored at 1e-6, and the row's score grows by idf * (f * (k1 + 1)) /
        (f + k1 * (1 - b + b * D / avgdl)), phrase by phrase in query order, in doubles."""
        if not phrases or depth <= 0:
            return []
        k1 = BM25_K1
        rows, parts = [], []
        for docs, hits in phrases:
            ids = docs.astype(np.intp)
            rows.append(ids)
            if hits.dtype.kind == "f":  # a phrase's parts, from FTS5's bm25() of it alone
                parts.append(hits)
                continue
            n_hit = len(docs)
            idf = math.log((self.rows - n_hit + 0.5) / (n_hit + 0.5))
            if idf <= 0.0:
                idf = 1e-6
            # idf * ((f * (k1 + 1)) / (f + norm)), in place (a + b == b + a, exactly)
            freq = hits.astype(np.float64)
            denominator = self.norms[ids]
            denominator += freq
            np.multiply(freq, k1 + 1.0, out=freq)
            np.divide(freq, denominator, out=freq)
            np.multiply(freq, idf, out=freq)
            parts.append(freq)
        if len(phrases) == 1:
            ids, scores = rows[0], parts[0]
        else:
            ids = np.concatenate(rows)
            try:
                for phrase_ids, part in zip(rows, parts, strict=True):
                    self._scores[phrase_ids] += part  # each row once a phrase, in query order
                scores = self._scores[ids]
            finally:
                self._scores[ids] = 0.0
            # a row is in ids once per phrase holding it: the (depth * phrases)-th best entry
            # is at most the depth-th best row's score, so every row of the top depth (ties
            # included) is kept, then each once
            if len(ids) > depth * len(rows):
                cut = len(ids) - depth * len(rows)
                keep = np.flatnonzero(scores >= np.partition(scores, cut)[cut])
                ids, scores = ids[keep], scores[keep]
            ids, first = np.unique(ids, return_index=True)
            scores = scores[first]
        if len(ids) > depth:
            cut = len(ids) - depth
            keep = np.flatnonzero(scores >= np.partition(scores, cut)[cut])
            ids, scores = ids[keep], scores[keep]
        order = np.lexsort((ids, -scores))[:depth]
        return [(int(i), float(s)) for i, s in zip(ids[order], scores[order], strict=True)]


def bm25_top(phrases: Sequence[tuple[np.ndarray, np.ndarray]], rows: int, avgdl: float,
             lengths: np.ndarray, depth: int) -> list[tuple[int, float]]:
    """:meth:`Bm25Ranker.top` for one query (``lengths``: every row's length in tokens)."""
    return Bm25Ranker(rows, lengths, avgdl).top(phrases, depth)
