"""The retrieval stage: ranking over a KB store, and over given texts in memory.

:class:`Retriever` ranks a KB store's chunks for queries: lexical (the store's BM25
candidates), dense (its vector-similarity candidates) or hybrid (reciprocal rank fusion of
the top ``candidates`` of each), and hands back :class:`~medverify.records.Passage` lists
with their scores. The store (:mod:`medverify.kb`) only stores and answers those primitive
searches.

The same ranking runs in memory over texts that are not in a KB: :class:`TextIndex` is a
BM25 index over given texts (with their vectors, when dense similarity is wanted), used by
the citation audit to pick a fetched page's passages (:mod:`medverify.audit.select`) and by
the fact-check loop to trim retrieved chunks to windows (:mod:`medverify.factcheck.loop`).

:func:`rrf` is a small pure function over ranked lists of ids, so it can be tested with
hand-made lists.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, cast

import numpy as np

from medverify.config import RetrievalSettings
from medverify.errors import ConfigError
from medverify.records import Passage, Span

if TYPE_CHECKING:
    from medverify.kb.protocol import Candidate, KBStore, StoredChunk, Subset

Mode = Literal["hybrid", "lexical", "dense"]
MODES: tuple[Mode, ...] = ("hybrid", "lexical", "dense")

Ranked = tuple[int, dict[str, float]]
"""(candidate, its scores by name): a chunk id, or the position of a text in memory."""


# ---- fusion -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fused:
    """One fused candidate: its id, fused score and 1-based rank in each input list."""

    id: Hashable
    score: float
    ranks: dict[str, int] = field(default_factory=dict)


def rrf(rankings: Mapping[str, Sequence[Hashable]], rrf_k: int = 60,
        weights: Mapping[str, float] | None = None, limit: int | None = None) -> list[Fused]:
    """Reciprocal rank fusion: score(d) = sum over lists of weight / (rrf_k + rank(d)).

    ``rankings`` maps a list name (e.g. ``"lexical"``) to ids, best first; an id repeated
    within one list counts at its best rank. Ties are broken by the best single rank,
    then by first appearance, so the result is deterministic.
    """
    scores: dict[Hashable, float] = {}
    ranks: dict[Hashable, dict[str, int]] = {}
    for name, ids in rankings.items():
        weight = 1.0 if weights is None else weights.get(name, 1.0)
        for rank, item in enumerate(ids, start=1):
            seen = ranks.setdefault(item, {})
            if name in seen:
                continue
            seen[name] = rank
            scores[item] = scores.get(item, 0.0) + weight / (rrf_k + rank)
    order = {item: i for i, item in enumerate(scores)}
    fused = sorted(scores, key=lambda i: (-scores[i], min(ranks[i].values()), order[i]))
    return [Fused(id=i, score=scores[i], ranks=ranks[i]) for i in fused[:limit]]


def fuse_candidates(lexical: Sequence[Candidate] | None, dense: Sequence[Candidate] | None,
                    k: int, rrf_k: int = 60) -> list[Ranked]:
    """The top ``k`` of one or two candidate lists, each (id, score) best first.

    With one list, its order and scores (``{name: score, "fused": score}``); with both,
    reciprocal rank fusion, each id scored ``{"lexical"/"dense": its raw score in the lists
    it is in, "fused": its RRF score}``.
    """
    if dense is None or lexical is None:
        name, hits = ("lexical", lexical) if dense is None else ("dense", dense)
        return [(cid, {name: s, "fused": s}) for cid, s in (hits or [])[:k]]
    raw = {"lexical": dict(lexical), "dense": dict(dense)}
    fused = rrf({"lexical": [c for c, _ in lexical], "dense": [c for c, _ in dense]},
                rrf_k=rrf_k, limit=k)
    return [(int(f.id), {**{n: raw[n][int(f.id)] for n in f.ranks}, "fused": f.score})
            for f in fused]


# ---- ranking a KB store ---------------------------------------------------------------------


class Retriever:
    """Lexical, dense or hybrid ranking of a KB store's chunks.

    ``settings`` default to the ones the store was opened with (``store.retrieval``):
    ``top_k`` and ``mode`` are the defaults of :meth:`search_many`, ``candidates`` the
    depth of each list fused in hybrid mode, ``rrf_k`` the fusion constant.
    """

    def __init__(self, store: KBStore, settings: RetrievalSettings | None = None) -> None:
        self.store = store
        self.settings = settings or getattr(store, "retrieval", None) or RetrievalSettings()

    def search(self, query: str, k: int | None = None, mode: Mode | None = None) -> list[Passage]:
        """Top ``k`` passages for one query."""
        return self.search_many([query], k, mode)[0]

    def search_many(self, queries: Sequence[str], k: int | None = None,
                    mode: Mode | None = None, *,
                    where: Mapping[str, str] | None = None) -> list[list[Passage]]:
        """Top ``k`` passages per query (default ``settings.top_k``, ``settings.mode``);
        the queries are embedded in one batch. ``where`` keeps only chunks of documents
        whose metadata matches every ``key=value`` (e.g. ``{"nct_id": "NCT02210780"}`` in
        a trial KB), ranked exactly among themselves (see :meth:`rank_subset`)."""
        k = self.settings.top_k if k is None else k
        mode = self.settings.mode if mode is None else mode
        if mode not in MODES:
            raise ConfigError(f"unknown search mode {mode!r}: use one of {', '.join(MODES)}")
        if where:
            return self.rank_subset(queries, k, mode, where)
        with self.store.reading():
            return [self._passages(ranked) for ranked in self.rank_many(queries, k, mode)]

    def rank_subset(self, queries: Sequence[str], k: int, mode: Mode,
                    where: Mapping[str, str]) -> list[list[Passage]]:
        """Search only the chunks the metadata filter ``where`` selects: BM25 over their
        texts (and titles) and inner products with their stored vectors, fused as in
        :meth:`rank_many`. Exact, in memory: the store refuses a filter that matches more
        chunks than it ranks that way."""
        select = getattr(self.store, "subset", None)
        if select is None:
            raise ConfigError(f"this knowledge base store ({type(self.store).__name__}) "
                              "cannot filter by document metadata")
        return self._rank_in(select(where), queries, k, mode)

    def search_apart(self, queries: Sequence[str], k: int, mode: Mode, *, prefix: str,
                     apart: int) -> tuple[list[list[Passage]], list[list[Passage]]]:
        """(per query, the top ``k`` passages of the documents whose id does not start with
        ``prefix``, ranked exactly as if the others were not in the candidate lists; per
        query, the top ``apart`` of those that do, ranked among themselves). The KB's
        clinician-taught documents (``review-``) are searched this way, so teaching never
        moves an unrelated claim's passages (only BM25's corpus statistics see them)."""
        select = getattr(self.store, "subset", None)
        subset = select({"doc_id_prefix": prefix}) if select is not None else None
        if subset is None or not subset.chunks:
            return self.search_many(queries, k, mode), [[] for _ in queries]
        exclude = frozenset(c.id for c in subset.chunks)
        with self.store.reading():
            ranked = self.rank_many(queries, k, mode, exclude=exclude)
            main = [self._passages(r) for r in ranked]
        taught = (self._rank_in(subset, queries, apart, mode) if apart > 0
                  else [[] for _ in queries])
        return main, taught

    def _rank_in(self, subset: Subset, queries: Sequence[str], k: int,
                 mode: Mode) -> list[list[Passage]]:
        """Exact BM25 / dense ranking of a subset's chunks in memory, fused as in
        :meth:`rank_many`."""
        if not subset.chunks:
            return [[] for _ in queries]
        texts = [f"{c.title or ''}\n{c.text}" for c in subset.chunks]
        bm25 = BM25(texts) if mode != "dense" else None
        vectors = None
        if mode != "lexical":
            embedder = getattr(self.store, "embedder", None)
            if embedder is None:
                raise ConfigError("this knowledge base store has no embedder for dense search")
            vectors = np.asarray(embedder.embed(list(queries)), dtype=np.float32)
        depth = max(k, self.settings.candidates)
        by_id = {c.id: c for c in subset.chunks}
        out = []
        for n, query in enumerate(queries):
            lexical = dense = None
            if bm25 is not None:
                scores = bm25.scores(query)
                lexical = [(subset.chunks[i].id, float(scores[i])) for i in order(scores)
                           if scores[i] > 0][:depth]
            if vectors is not None:
                sims = subset.vectors @ vectors[n]
                dense = [(subset.chunks[i].id, float(sims[i])) for i in order(sims)[:depth]]
            ranked = fuse_candidates(lexical, dense, k, self.settings.rrf_k)
            out.append([passage(by_id[cid], scores) for cid, scores in ranked])
        return out

    def rank_many(self, queries: Sequence[str], k: int, mode: Mode, *,
                  exclude: frozenset[int] = frozenset()) -> list[list[Ranked]]:
        """Per query, the top ``k`` (chunk id, scores), best first (no passage fetched);
        chunks in ``exclude`` are taken out of each candidate list before fusion."""
        depth = k if mode != "hybrid" else max(k, self.settings.candidates)
        deeper = depth + len(exclude)  # then cut back to depth: the lists fusion would see
        with self.store.reading():
            lexical = ([_without(self.store.lexical_candidates(q, deeper), exclude, depth)
                        for q in queries] if mode != "dense" else None)
            dense = ([_without(hits, exclude, depth) for hits in
                      self.store.dense_candidates(list(queries), deeper)]
                     if mode != "lexical" else None)
        return [fuse_candidates(lexical[i] if lexical else None, dense[i] if dense else None, k,
                                self.settings.rrf_k) for i in range(len(queries))]

    def _passages(self, ranked: list[Ranked]) -> list[Passage]:
        if not ranked:
            return []
        by_id = self.store.chunks([cid for cid, _ in ranked])
        return [passage(by_id[cid], scores) for cid, scores in ranked if cid in by_id]


def _without(hits: list[Candidate], exclude: frozenset[int], depth: int) -> list[Candidate]:
    return [h for h in hits if h[0] not in exclude][:depth] if exclude else hits


def passage(chunk: StoredChunk, scores: dict[str, float]) -> Passage:
    """A stored chunk as a retrieved passage, scored (``score`` is the fused score)."""
    return Passage(id=f"{chunk.doc_id}#{chunk.order}", doc_id=chunk.doc_id, text=chunk.text,
                   title=chunk.title, url=chunk.url, source=chunk.source,
                   span=Span(start=chunk.start, end=chunk.end), score=scores["fused"],
                   scores=scores)


def retrieve(kb: KBStore, queries: list[str],
             settings: RetrievalSettings | None = None) -> list[list[Passage]]:
    """Top-k passages per query (one batch: the queries are embedded together); ``settings``
    give k and the mode, the store's own settings the fusion."""
    settings = settings or RetrievalSettings()
    return Retriever(kb).search_many(queries, k=settings.top_k, mode=settings.mode)


def dedupe_documents(passages: Sequence[Passage], limit: int | None = None) -> list[str]:
    """Document ids in first-seen order (chunks of one document count once)."""
    seen: dict[str, None] = {}
    for item in passages:
        seen.setdefault(item.doc_id, None)
    return list(seen)[:limit]


# ---- ranking given texts in memory ----------------------------------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)
_STOPWORD_TEXT = """
a an the of and or in on at to for by with from is are was were be been being it its
this that these those as but not no can may might will would should could do does did
has have had than then there their they them he she his her we you i our your
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def terms(text: str) -> list[str]:
    """Lower-cased word terms without stopwords (BM25's tokens)."""
    return [w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]


class BM25:
    """Okapi BM25 over a small in-memory collection (e.g. the passages of one source)."""

    def __init__(self, texts: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.docs = [Counter(terms(t)) for t in texts]
        self.lengths = np.array([sum(d.values()) for d in self.docs], dtype=np.float64)
        self.avg = float(self.lengths.mean()) if len(self.docs) else 0.0
        df = Counter(term for doc in self.docs for term in doc)
        n = len(self.docs)
        self.idf = {t: math.log(1.0 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: str) -> np.ndarray:
        out = np.zeros(len(self.docs), dtype=np.float64)
        norm = self.k1 * (1.0 - self.b + self.b * self.lengths / max(self.avg, 1e-9))
        for term in set(terms(query)):
            idf = self.idf.get(term)
            if idf is None:
                continue
            tf = np.array([doc.get(term, 0) for doc in self.docs], dtype=np.float64)
            out += idf * tf * (self.k1 + 1.0) / (tf + norm)
        return out


def order(scores: np.ndarray) -> list[int]:
    """Indices by decreasing score (ties by position)."""
    return [int(i) for i in np.argsort(-scores, kind="stable")]


def fuse_scores(lexical: np.ndarray, dense: np.ndarray | None, k: int, *,
                also: Mapping[str, Sequence[int]] | None = None,
                rrf_k: int = 60) -> list[Ranked]:
    """The top ``k`` positions by per-text scores.

    Without ``dense``: by BM25 alone, scored ``{"bm25": s}``. With it: reciprocal rank
    fusion of the BM25 order, the dense order and any ``also`` rankings (positions, best
    first, e.g. the order a retriever returned them in), scored ``{"rrf", "bm25", "dense"}``.
    """
    if dense is None:
        return [(i, {"bm25": float(lexical[i])}) for i in order(lexical)[:k]]
    fused = rrf({"bm25": order(lexical), "dense": order(dense), **(also or {})},
                rrf_k=rrf_k, limit=k)
    ranked = []
    for f in fused:
        i = cast(int, f.id)
        ranked.append((i, {"rrf": f.score, "bm25": float(lexical[i]), "dense": float(dense[i])}))
    return ranked


class TextIndex:
    """Given texts ranked in memory: BM25 over them and, with their ``vectors``, dense
    similarity (inner product) to a query vector, fused by :func:`fuse_scores`."""

    def __init__(self, texts: Sequence[str], vectors: np.ndarray | None = None) -> None:
        self.bm25 = BM25(texts)
        self.vectors = vectors

    def __len__(self) -> int:
        return len(self.bm25.docs)

    def lexical(self, query: str) -> np.ndarray:
        """BM25 score of every text for ``query``."""
        return self.bm25.scores(query)

    def dense(self, vector: np.ndarray) -> np.ndarray:
        """Similarity of every text's vector to ``vector``."""
        if self.vectors is None:
            raise ValueError("this TextIndex was built without vectors")
        return self.vectors @ vector

    def rank(self, query: str, k: int, *, vector: np.ndarray | None = None,
             dense: np.ndarray | None = None,
             also: Mapping[str, Sequence[int]] | None = None) -> list[Ranked]:
        """The best ``k`` texts for ``query`` as (position, scores): by BM25 alone, or
        fused with dense similarity (to ``vector``, or the given ``dense`` scores)."""
        if dense is None and vector is not None:
            dense = self.dense(vector)
        return fuse_scores(self.lexical(query), dense, k, also=also)
