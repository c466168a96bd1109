"""Hybrid retrieval: reciprocal rank fusion of ranked candidate lists.

:func:`rrf` is a small pure function over ranked lists of ids, so it can be tested with
hand-made lists; :func:`retrieve` is the entry point the pipeline uses.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from medverify.config import RetrievalSettings
from medverify.records import Passage

if TYPE_CHECKING:
    from medverify.kb.store import KnowledgeBase


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


def dedupe_documents(passages: Sequence[Passage], limit: int | None = None) -> list[str]:
    """Document ids in first-seen order (chunks of one document count once)."""
    seen: dict[str, None] = {}
    for passage in passages:
        seen.setdefault(passage.doc_id, None)
    return list(seen)[:limit]


def retrieve(kb: KnowledgeBase, queries: list[str],
             settings: RetrievalSettings | None = None) -> list[list[Passage]]:
    """Top-k passages per query (one batch: the queries are embedded together)."""
    settings = settings or RetrievalSettings()
    return kb.search_many(queries, k=settings.top_k, mode=settings.mode)
