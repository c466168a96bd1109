"""Passage selection: the few passages of a long source that matter for a claim.

A source's text is split into passages of about ``passage_tokens`` tokens (the embedder's
tokenizer, a small overlap); per claim, passages are ranked by the retrieval stage's
in-memory ranking (:class:`medverify.retrieve.TextIndex`: reciprocal-rank fusion of BM25
over the source's passages and dense cosine similarity, passage vectors computed once per
source and reused for every claim), and the top ``k`` are kept. A
source no longer than ``k * passage_tokens`` tokens is used whole: selecting from it
would not make the judge read less.

``mode="lexical"`` ranks by BM25 alone and embeds nothing: on a CPU, embedding every long
cited page is most of an offline audit's time (benchmarks/bench_study.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from medverify.kb.chunking import chunk_text
from medverify.kb.embed import Embedder
from medverify.kb.embed_base import Tokenizer
from medverify.records import Claim, Passage, Source, Span, content_hash
from medverify.retrieve import BM25, Ranked, TextIndex, terms

__all__ = ["BM25", "PassageSelector", "Selected", "SourcePassages", "terms"]


@dataclass(frozen=True)
class SourcePassages:
    """A source split into passages, with what ranking needs (computed once per source):
    ``index`` ranks them (BM25, and their vectors in hybrid mode), when there are more
    than ``k`` of them."""

    passages: list[Passage]
    n_tokens: list[int]
    index: TextIndex
    source_tokens: int
    whole: bool


@dataclass(frozen=True)
class Selected:
    """The passages selected for one claim-source pair and the judge-input token counts:
    claim + selected passages (``input_tokens``) versus claim + whole source."""

    passages: list[Passage]
    input_tokens: int
    source_tokens: int


class PassageSelector:
    """Select the best ``k`` passages of a source per claim (lexical + dense, fused)."""

    def __init__(
        self,
        embedder: Embedder,
        tokenizer: Tokenizer | None = None,
        passage_tokens: int = 128,
        k: int = 3,
        *,
        overlap: int | None = None,
        cache_size: int = 2048,
        mode: Literal["hybrid", "lexical"] = "hybrid",
    ) -> None:
        self.embedder = embedder
        self.mode = mode
        self.tokenizer = tokenizer or embedder.tokenizer
        self.passage_tokens = passage_tokens
        self.k = k
        self.overlap = passage_tokens // 8 if overlap is None else overlap
        self._cache: OrderedDict[str, SourcePassages] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.offsets(text))

    def select(self, claims: Sequence[Claim], source: Source) -> dict[str, list[Passage]]:
        """claim id -> the passages of ``source`` selected for it, best first."""
        chosen = self.select_pairs([(claim, source) for claim in claims])
        return {claim.id: sel.passages for claim, sel in zip(claims, chosen, strict=True)}

    def select_pairs(self, pairs: Sequence[tuple[Claim, Source]]) -> list[Selected]:
        """Selections for many claim-source pairs; each claim text is embedded once and
        each source split and embedded once."""
        texts = list(dict.fromkeys(claim.text for claim, source in pairs if self._needs(source)))
        vectors = dict(zip(texts, self._embed(texts), strict=True)) if texts else {}
        claim_tokens = {c.text: self.count_tokens(c.text) for c, _ in pairs}
        out = []
        for claim, source in pairs:
            split = self.passages(source)
            chosen = self._rank(claim.text, vectors.get(claim.text), split)
            used = sum(split.n_tokens[i] for i, _ in chosen)
            out.append(
                Selected(
                    passages=[_scored(split.passages[i], scores) for i, scores in chosen],
                    input_tokens=claim_tokens[claim.text] + used,
                    source_tokens=claim_tokens[claim.text] + split.source_tokens,
                )
            )
        return out

    def passages(self, source: Source) -> SourcePassages:
        """The source's passages and their vectors. Splitting and embedding are cached by
        the text's hash, so a page cited by many answers (or models) is embedded once; a
        hit for another source only renames the passages."""
        key = content_hash(source.text or "")
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
        if cached is None:
            cached = self._split(source)
            with self._lock:
                self._cache[key] = cached
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return _renamed(cached, source)

    def _needs(self, source: Source) -> bool:
        """Whether claims judged against ``source`` need a vector."""
        if self.mode == "lexical":
            return False
        split = self.passages(source)
        return not split.whole and len(split.passages) > self.k

    def _split(self, source: Source) -> SourcePassages:
        text = source.text or ""
        total = self.count_tokens(text)
        whole = total <= self.k * self.passage_tokens
        if whole:
            spans = [(Span(start=0, end=len(text)), text, total)] if text.strip() else []
        else:
            chunks = chunk_text(text, self.tokenizer, self.passage_tokens, self.overlap)
            spans = [(c.span, c.text, c.n_tokens) for c in chunks]
        passages = [
            Passage(id=f"{source.id}:{n}", doc_id=source.id, text=chunk, title=source.title,
                    url=source.url, source="audit", span=span)
            for n, (span, chunk, _) in enumerate(spans, 1)
        ]
        many = not whole and len(passages) > self.k
        dense = many and self.mode == "hybrid"
        vectors = self._embed([p.text for p in passages]) if dense else None
        return SourcePassages(
            passages=passages,
            n_tokens=[n for _, _, n in spans],
            index=TextIndex([p.text for p in passages] if many else [], vectors),
            source_tokens=total,
            whole=whole,
        )

    def _embed(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            return np.asarray(self.embedder.embed(texts), dtype=np.float32)

    def _rank(self, claim: str, vector: np.ndarray | None, split: SourcePassages) -> list[Ranked]:
        """(passage index, scores) of the passages to keep for ``claim``, best first: all
        of them when there are at most ``k``, else ranked by the retrieval stage (BM25
        alone in lexical mode, where ``vector`` is None)."""
        if len(split.passages) <= self.k:
            return [(i, {}) for i in range(len(split.passages))]
        return split.index.rank(claim, self.k, vector=vector)


def _renamed(split: SourcePassages, source: Source) -> SourcePassages:
    """``split`` with its passages attributed to ``source`` (same text, another citation)."""
    first = split.passages[0] if split.passages else None
    if first is None or (first.doc_id == source.id and first.url == source.url
                         and first.title == source.title):
        return split
    passages = [
        p.model_copy(update={"id": f"{source.id}:{n}", "doc_id": source.id,
                             "title": source.title, "url": source.url})
        for n, p in enumerate(split.passages, 1)
    ]
    return replace(split, passages=passages)


def _scored(passage: Passage, scores: dict[str, float]) -> Passage:
    if not scores:
        return passage
    score = scores.get("rrf", scores.get("bm25"))
    return passage.model_copy(update={"score": score, "scores": scores})
