"""The ``nei`` family: claims whose evidence lacks their key content (:func:`lacks_key_content`):
a BM25 hard negative from another document group (:class:`PassageIndex`), a window of the same
document about something else, or the document around the sentence without the sentence."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import numpy as np

from medverify.verifier.corpus.records import Candidate, CandidatePools, Document
from medverify.verifier.corpus.text import _TOKEN, _n_words, _window, content_words


def add_nei(pools: CandidatePools, d: int, i: int, sentence: str) -> None:
    """The three ``nei`` candidates of claimable sentence ``i`` of document ``d``."""
    pools.add(Candidate("bm25_hard", d, i, i, sentence))
    pools.add(Candidate("sentence_removed", d, i, i, sentence, i))
    pools.add(Candidate("same_doc_other", d, i, i, sentence, i))


def lacks_key_content(
    claim: str, evidence: str, idf: dict[str, float], max_cover: float = 0.6
) -> bool:
    """True if ``evidence`` misses the claim's key content: at most ``max_cover`` of its content
    words, and at least one of its two rarest words (or one of its numbers) absent."""
    words = list(dict.fromkeys(content_words(claim)))
    if not words:
        return False
    ev = set(_TOKEN.findall(evidence.lower()))
    cover = sum(w in ev for w in words) / len(words)
    if cover > max_cover:
        return False
    rare = sorted(words, key=lambda w: (-idf.get(w, 10.0), w))[:2]
    numbers = [w for w in words if w.isdigit()]
    return any(w not in ev for w in rare) or any(n not in ev for n in numbers)


# ---------------------------------------------------------------- BM25 over passages


class PassageIndex:
    """BM25 over fixed passages with an inverted index in numpy (fast top-k per query)."""

    def __init__(
        self, texts: Sequence[str], k1: float = 1.2, b: float = 0.75, max_df: float = 0.1
    ) -> None:
        self.n = len(texts)
        vocab: dict[str, int] = {}
        rows: list[int] = []
        cols: list[int] = []
        vals: list[int] = []
        lengths = np.zeros(self.n, dtype=np.float32)
        for i, text in enumerate(texts):
            counts = Counter(content_words(text))
            lengths[i] = sum(counts.values())
            for term, tf in counts.items():
                rows.append(vocab.setdefault(term, len(vocab)))
                cols.append(i)
                vals.append(tf)
        term_ids = np.asarray(rows, dtype=np.int64)
        doc_ids = np.asarray(cols, dtype=np.int32)
        tfs = np.asarray(vals, dtype=np.float32)
        order = np.argsort(term_ids, kind="stable")
        term_ids, doc_ids, tfs = term_ids[order], doc_ids[order], tfs[order]
        bounds = np.searchsorted(term_ids, np.arange(len(vocab) + 1))
        df = np.diff(bounds)
        avg = float(lengths.mean()) if self.n else 1.0
        norm = k1 * (1 - b + b * lengths / max(avg, 1e-9))
        weights = tfs * (k1 + 1) / (tfs + norm[doc_ids])
        self.idf = np.log(1 + (self.n - df + 0.5) / (df + 0.5)).astype(np.float32)
        self.vocab = vocab
        self.bounds = bounds
        self.doc_ids = doc_ids
        self.weights = weights
        self.max_df = max(2, int(max_df * self.n))

    def top(self, query: str, k: int = 20, max_terms: int = 10) -> list[int]:
        """Indices of the ``k`` best passages for ``query`` (best first)."""
        ids = [self.vocab[t] for t in dict.fromkeys(content_words(query)) if t in self.vocab]
        ids = [t for t in ids if self.bounds[t + 1] - self.bounds[t] <= self.max_df]
        ids = sorted(ids, key=lambda t: -self.idf[t])[:max_terms]
        if not ids:
            return []
        scores = np.zeros(self.n, dtype=np.float32)
        for t in ids:
            a, b = self.bounds[t], self.bounds[t + 1]
            scores[self.doc_ids[a:b]] += self.idf[t] * self.weights[a:b]
        k = min(k, self.n)
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.lexsort((best, -scores[best]))]
        return [int(i) for i in best if scores[i] > 0]


class NeiEvidence:
    """Draws the evidence of ``nei`` candidates (BM25 passages are indexed on first use)."""

    def __init__(
        self, docs: Sequence[Document], idf: dict[str, float], seed: int, max_words: int
    ) -> None:
        self.docs = docs
        self.idf = idf
        self.seed = seed
        self.max_words = max_words
        self._index: PassageIndex | None = None
        self.passages: list[tuple[int, str]] = []

    def index(self) -> PassageIndex:
        """BM25 over passages of 2-5 consecutive sentences (at most ``max_words`` words)."""
        if self._index is None:
            rng = random.Random(f"{self.seed}:passages")
            for d, doc in enumerate(self.docs):
                self._add_passages(d, doc, rng)
            self._index = PassageIndex([t for _, t in self.passages])
        return self._index

    def _add_passages(self, d: int, doc: Document, rng: random.Random) -> None:
        k = 0
        while k < len(doc.sentences):
            size = rng.randint(2, 5)
            end = k
            words = 0
            while (
                end < len(doc.sentences)
                and end - k < size
                and words + _n_words(doc.sentences[end]) <= self.max_words
            ):
                words += _n_words(doc.sentences[end])
                end += 1
            end = max(end, k + 1)
            text = " ".join(doc.sentences[k:end])
            if _n_words(text) <= self.max_words:
                self.passages.append((d, text))
            k = end

    def make(self, cand: Candidate, claim: str, rng: random.Random) -> tuple[str, str] | None:
        """(claim, evidence) of an ``nei`` candidate, or None if no evidence lacks the claim."""
        doc = self.docs[cand.doc]
        if cand.edit_type == "bm25_hard":
            return self._bm25_hard(doc, claim)
        if cand.edit_type == "same_doc_other":
            return self._same_doc_other(doc, cand, claim, rng)
        evidence = _window(
            doc, cand.lo, cand.hi, rng, self.max_words, cand.lo, extra=rng.randint(2, 6)
        )
        if evidence and lacks_key_content(claim, evidence, self.idf):
            return claim, evidence
        return None

    def _bm25_hard(self, doc: Document, claim: str) -> tuple[str, str] | None:
        for p in self.index().top(claim, k=30):
            d, text = self.passages[p]
            if self.docs[d].group != doc.group and lacks_key_content(claim, text, self.idf):
                return claim, text
        return None

    def _same_doc_other(
        self, doc: Document, cand: Candidate, claim: str, rng: random.Random
    ) -> tuple[str, str] | None:
        others = [
            j
            for j in range(len(doc.sentences))
            if abs(j - cand.lo) >= 3 or doc.paras[j] != doc.paras[cand.lo]
        ]
        rng.shuffle(others)
        for j in others[:6]:
            evidence = _window(doc, j, j, rng, self.max_words, exclude=cand.lo)
            if evidence and lacks_key_content(claim, evidence, self.idf):
                return claim, evidence
        return None
