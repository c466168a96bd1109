"""Lexical search over the FTS5 table: query terms of untrusted text made inert, and ranking.

What goes into a ``chunks_fts MATCH`` expression, and the words counted per chunk in the
``terms`` table (whose document frequencies let a query on a large KB skip very common
words). The ranking of a lexical query is here too (:func:`rank_lexical`): the bm25
scores come from SQLite's FTS5, or on a large KB with fresh stored postings
(:class:`StoredPostings`) from the same formula computed here in numpy
(:class:`Bm25Ranker`), or, opted in, from the bounded rank query (:func:`idf_ranked`);
``KnowledgeBase.lexical_candidates`` serves what they rank. The stored postings are built
by :mod:`medverify.kb.postings_build`.
"""

from __future__ import annotations

import heapq
import math
import re
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from medverify.kb.fts_memory import held
from medverify.kb.protocol import Candidate

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
        rows = [docs.astype(np.intp) for docs, _ in phrases]
        parts = [self._part(ids, hits) for ids, (_, hits) in zip(rows, phrases, strict=True)]
        if len(phrases) == 1:
            ids, scores = rows[0], parts[0]
        else:
            ids, scores = self._summed(rows, parts, depth)
        if len(ids) > depth:
            cut = len(ids) - depth
            keep = np.flatnonzero(scores >= np.partition(scores, cut)[cut])
            ids, scores = ids[keep], scores[keep]
        order = np.lexsort((ids, -scores))[:depth]
        return [(int(i), float(s)) for i, s in zip(ids[order], scores[order], strict=True)]

    def _part(self, ids: np.ndarray, hits: np.ndarray) -> np.ndarray:
        """One phrase's share of each matching row's score (floats: given, from FTS5's
        bm25() of the phrase alone)."""
        if hits.dtype.kind == "f":
            return hits
        n_hit = len(ids)
        idf = math.log((self.rows - n_hit + 0.5) / (n_hit + 0.5))
        if idf <= 0.0:
            idf = 1e-6
        # idf * ((f * (k1 + 1)) / (f + norm)), in place (a + b == b + a, exactly)
        freq = hits.astype(np.float64)
        denominator = self.norms[ids]
        denominator += freq
        np.multiply(freq, BM25_K1 + 1.0, out=freq)
        np.divide(freq, denominator, out=freq)
        np.multiply(freq, idf, out=freq)
        return freq

    def _summed(self, rows: list[np.ndarray], parts: list[np.ndarray],
                depth: int) -> tuple[np.ndarray, np.ndarray]:
        """Each row's score summed over the phrases (in query order), cut to the rows that
        can be in the top ``depth``; each row once."""
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
        return ids, scores[first]


def bm25_top(phrases: Sequence[tuple[np.ndarray, np.ndarray]], rows: int, avgdl: float,
             lengths: np.ndarray, depth: int) -> list[tuple[int, float]]:
    """:meth:`Bm25Ranker.top` for one query (``lengths``: every row's length in tokens)."""
    return Bm25Ranker(rows, lengths, avgdl).top(phrases, depth)


# ---- ranking a lexical query: bm25(), stored postings, or the bounded rank query ----------

@dataclass(frozen=True)
class LexicalKnobs:
    """How a KB ranks lexical queries (``KnowledgeBase``'s ``lexical_*`` attributes)."""

    budget: int  # postings a query may touch before its most common words are dropped
    exact: int  # postings up to which bm25() ranks even on a large KB
    large: int | None  # chunks from which the bounded rank query may rank (None: never)
    postings_from: int | None  # chunks from which fresh stored postings rank (None: never)


def document_frequencies(conn: sqlite3.Connection, terms: Sequence[str]) -> dict[str, int]:
    """The chunks holding each of ``terms`` (the ``terms`` table), by term."""
    marks = ",".join("?" * len(terms))
    rows = conn.execute(f"SELECT term, df FROM terms WHERE term IN ({marks})", terms)
    return dict(rows.fetchall())


def last_chunk_id(conn: sqlite3.Connection) -> int:
    """The KB's size in chunks, near enough (ids only grow) and O(log n) to read."""
    return int(conn.execute("SELECT max(id) FROM chunks").fetchone()[0] or 0)


def rank_lexical(conn: sqlite3.Connection, query: str, depth: int, knobs: LexicalKnobs,
                 postings: Callable[[Sequence[str], int], list[Candidate] | None],
                 ) -> list[Candidate]:
    """Up to ``depth`` (chunk id, BM25 score) of the chunks matching the query's terms,
    best first (ties by chunk id). The terms are quoted (inert FTS5 syntax); on a large KB
    the most common ones are dropped past ``knobs.budget`` postings.

    FTS5's ``bm25()`` costs tens of microseconds per matching row (measured at 1M chunks:
    docs/scale.md), so on a KB of ``knobs.postings_from`` chunks or more (``[kb_settings]
    lexical_postings_from``, 100,000 by default) that holds stored postings built at its
    current generation (``KnowledgeBase.build_lexical_postings``), the same bm25 is computed
    from them in numpy (``postings``: :meth:`StoredPostings.ranked` of the budgeted terms,
    None when not fresh): the same scores and order as bm25() (a word FTS5 splits into
    several tokens adds FTS5's bm25() of that phrase alone). A KB below that size (up to
    ``fts_memory.MEMORY_ROWS`` chunks) is ranked the same way, where bm25() would rank it,
    from posting lists read from FTS5's index and held in memory per generation, unless
    ``knobs.postings_from`` is None (always bm25()). Without fresh postings, bm25() ranks;
    with ``knobs.large`` set (``lexical_bounded_from``, opt-in), a query past
    ``knobs.exact`` postings on a KB that large is ranked by the bounded rank query
    instead (summed idf: fast, but it agrees poorly with bm25)."""
    terms = query_terms(query)
    if not terms:
        return []
    df = document_frequencies(conn, terms)
    terms = select_terms(terms, df, knobs.budget)
    size = last_chunk_id(conn)
    if knobs.postings_from is not None and size >= knobs.postings_from:
        ranked = postings(terms, depth)
        if ranked is not None:
            return ranked
    if (knobs.large is not None and sum(df.get(t, 0) for t in terms) > knobs.exact
            and size >= knobs.large):
        return idf_ranked(conn, terms, depth, knobs.budget)
    if knobs.postings_from is not None and size < knobs.postings_from:
        ranked = memory_ranked(conn, terms, depth)  # a small KB: bm25() from memory
        if ranked is not None:
            return ranked
    rows = conn.execute(
        "SELECT rowid, bm25(chunks_fts) AS s FROM chunks_fts WHERE chunks_fts MATCH ? "
        "ORDER BY s, rowid LIMIT ?", (fts_match(terms), depth)).fetchall()
    return [(int(r[0]), -float(r[1])) for r in rows]


def memory_ranked(conn: sqlite3.Connection, terms: Sequence[str],
                  depth: int) -> list[Candidate] | None:
    """bm25 over ``conn``'s posting lists held in memory (:mod:`medverify.kb.fts_memory`);
    None when the KB is too large for them, changed meanwhile, or a query word has no
    FTS5 token (then bm25() ranks)."""
    memory = held(conn)
    try:
        generation = memory.now()
        if memory.generation != generation or memory.ranker is None:
            found = memory.lengths(generation)
            if found is None:
                return None
            lengths, rows = found
            memory.ranker = Bm25Ranker(rows, lengths, float(int(lengths.sum())) / max(rows, 1))
        if memory.stored is None:
            memory.stored = StoredPostings(conn)  # its tokenizer and phrases
        return memory.stored.rank_lists(memory.ranker, memory.postings, generation, terms,
                                        depth)
    except sqlite3.OperationalError:  # (a store without these tables: bm25() ranks)
        return None


def idf_ranked(conn: sqlite3.Connection, terms: Sequence[str], depth: int,
               budget: int) -> list[Candidate]:
    """The bounded rank query: no bm25() call, each word's posting list read once (its
    first ``budget`` rows), a chunk scored by the summed idf of the words it holds."""
    total = last_chunk_id(conn)
    scores: dict[int, float] = {}
    for term in terms:
        ids = [r[0] for r in conn.execute(
            "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT ?",
            (fts_match([term]), budget))]
        idf = math.log(1.0 + (total - len(ids) + 0.5) / (len(ids) + 0.5))
        for chunk_id in ids:
            scores[chunk_id] = scores.get(chunk_id, 0.0) + idf
    best = heapq.nlargest(depth, scores.items(), key=lambda item: (item[1], -item[0]))
    return [(int(i), float(s)) for i, s in best]


class StoredPostings:
    """The stored postings of one KB connection, read to rank lexical queries: the ranker
    of the generation they were built at (cached), the KB's FTS5 tokenizer, and the
    phrases known to match nothing at that generation. Callers serialise (the KB's lock)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._tokenizer: FtsTokenizer | None = None
        self._at: tuple[int, Bm25Ranker] | None = None  # (generation, ranker)
        self._phrases_at: tuple[str | None, set[str]] = (None, set())  # matching nothing

    def forget(self) -> None:
        """Drop the cached ranker (after the postings were built again or dropped)."""
        self._at = None

    def meta(self) -> dict[str, str]:
        """The KB's generation and the postings' meta keys, as stored."""
        keys = ("generation", POSTINGS_GENERATION, POSTINGS_ROWS, POSTINGS_TOKENS)
        return dict(self._conn.execute(
            "SELECT key, value FROM meta WHERE key IN (?, ?, ?, ?)", keys).fetchall())

    def state(self) -> Literal["fresh", "stale", "missing"]:
        """Whether the KB holds stored postings at its current generation."""
        if self.meta().get(POSTINGS_GENERATION) is None:
            return "missing"
        return "fresh" if self.ranker() is not None else "stale"

    def ranker(self, meta: dict[str, str] | None = None) -> Bm25Ranker | None:
        """The ranker of the stored postings (their rows' lengths) when they were built at
        the KB's current generation (``meta``: :meth:`meta`, read now if not given); None
        when stale or absent."""
        meta = self.meta() if meta is None else meta
        built = meta.get(POSTINGS_GENERATION)
        if built is None or built != meta.get("generation"):
            return None
        if self._at is None or self._at[0] != int(built):
            try:
                row = self._conn.execute(
                    "SELECT lens FROM lexical_lengths WHERE id = 0").fetchone()
            except sqlite3.OperationalError:
                return None  # (the tables were dropped by hand)
            if row is None:
                return None
            rows, tokens = int(meta[POSTINGS_ROWS]), int(meta[POSTINGS_TOKENS])
            self._at = (int(built), Bm25Ranker(
                rows, np.frombuffer(row[0], dtype=LEN_DTYPE),
                float(tokens) / float(max(rows, 1))))
        return self._at[1]

    def ranked(self, terms: Sequence[str], depth: int) -> list[Candidate] | None:
        """bm25 over the stored postings (see :class:`Bm25Ranker`); None when there are no
        fresh postings (or a query word has no FTS5 token)."""
        meta = self.meta()
        ranker = self.ranker(meta)
        if ranker is None:
            return None
        return self.rank_lists(ranker, self._stored, meta.get("generation"), terms, depth)

    def rank_lists(self, ranker: Bm25Ranker,
                   lookup: Callable[[str], tuple[np.ndarray, np.ndarray] | bool | None],
                   generation: str | None, terms: Sequence[str],
                   depth: int) -> list[Candidate] | None:
        """The top ``depth`` over the posting lists ``lookup`` gives for the terms' FTS5
        tokens (None: the token is in no row; False: the lists cannot be read, and None is
        returned); None when a query word has no FTS5 token. A word FTS5 splits into
        several tokens is a phrase: its share of each row's score is FTS5's bm25() of that
        phrase alone (the same double), and a phrase that matches nothing (the usual case,
        remembered for ``generation``) adds nothing."""
        if self._tokenizer is None:
            self._tokenizer = FtsTokenizer(tokenizer_spec(self._conn))
        phrases = []
        for term, tokens in zip(terms, self._tokenizer.tokens(terms), strict=True):
            if not tokens:
                return None
            if len(tokens) > 1:
                parts = self._phrase_parts(term, generation)
                if parts is not None:
                    phrases.append(parts)
                continue
            found = lookup(tokens[0])
            if found is False:
                return None
            if found is not None and found is not True:
                phrases.append(found)
        return ranker.top(phrases, depth)

    def _stored(self, token: str) -> tuple[np.ndarray, np.ndarray] | bool | None:
        """``token``'s stored posting list (None: none; False: the tables are gone)."""
        try:
            row = self._conn.execute("SELECT docs, tfs FROM lexical_postings WHERE "
                                     "term = ?", (token,)).fetchone()
        except sqlite3.OperationalError:
            return False
        if row is None:
            return None
        return np.frombuffer(row[0], dtype=DOC_DTYPE), np.frombuffer(row[1], dtype=TF_DTYPE)

    def _phrase_parts(self, term: str,
                      generation: str | None) -> tuple[np.ndarray, np.ndarray] | None:
        """(row ids, bm25 parts) of a word FTS5 reads as a phrase of several tokens, from
        FTS5's bm25() of that phrase alone; None when it matches no row."""
        if self._phrases_at[0] != generation:
            self._phrases_at = (generation, set())
        if term in self._phrases_at[1]:
            return None
        rows = self._conn.execute(
            "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ? "
            "ORDER BY rowid", (fts_match([term]),)).fetchall()
        if not rows:
            if len(self._phrases_at[1]) < 10_000:
                self._phrases_at[1].add(term)
            return None
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        return ids, -np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows))
