"""Building the corpus: candidates of every family over the documents, then pairs drawn per
label and per edit type with water-filled quotas, each checked for duplicates and leakage."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from medverify.verifier.corpus.contradicted import add_edits
from medverify.verifier.corpus.entities import (
    SWAP_TYPES,
    SwapFinder,
    protected_names,
    swapped_claim,
)
from medverify.verifier.corpus.leakage import LeakageIndex
from medverify.verifier.corpus.nei import NeiEvidence, add_nei
from medverify.verifier.corpus.output import count_table
from medverify.verifier.corpus.records import (
    FAMILIES,
    LABELS,
    NEI_TYPES,
    Candidate,
    CandidatePools,
    CorpusPair,
    Document,
    Lexicons,
)
from medverify.verifier.corpus.sources import document_idf, drop_boilerplate
from medverify.verifier.corpus.supported import (
    add_abbreviations,
    add_fusion,
    add_restatements,
    add_synonyms,
)
from medverify.verifier.corpus.text import _hash, _window, claimable, normalize

# ---------------------------------------------------------------- candidates


def _candidates(
    docs: Sequence[Document], lex: Lexicons, caps: dict[str, int], seed: int
) -> tuple[dict[str, list[Candidate]], list[str], list[str]]:
    """Candidates per edit type over documents in a seeded order, each type up to its cap.

    Also returns the drug and condition names seen in the corpus (the swap pools).
    """
    rng = random.Random(f"{seed}:cand")
    pools = CandidatePools(caps)
    swaps = SwapFinder(lex)
    order = list(range(len(docs)))
    rng.shuffle(order)
    for d in order:
        _document_candidates(pools, swaps, d, docs[d], rng)
    return pools.pools, list(swaps.seen["drug_swap"]), list(swaps.seen["condition_swap"])


def _document_candidates(
    pools: CandidatePools, swaps: SwapFinder, d: int, doc: Document, rng: random.Random
) -> None:
    """The candidates of every family from document ``d``."""
    protected = protected_names(doc) - {""}
    for i, sentence in enumerate(doc.sentences):
        if claimable(sentence):
            add_restatements(pools, d, i, sentence, rng)
            add_nei(pools, d, i, sentence)
            add_edits(pools, d, i, sentence, rng)
            swaps.add_swaps(pools, d, i, sentence, protected, rng)
        add_fusion(pools, d, doc, i)
    add_abbreviations(pools, d, doc)
    add_synonyms(pools, d, doc)


# ---------------------------------------------------------------- building


class _Builder:
    """Completes candidates into (claim, evidence): the swap drawn, the evidence window cut."""

    def __init__(
        self,
        docs: Sequence[Document],
        drugs: list[str],
        conditions: list[str],
        idf: dict[str, float],
        seed: int,
        max_words: int,
    ) -> None:
        self.docs = docs
        self.pools = {"drug_swap": drugs, "condition_swap": conditions}
        self.max_words = max_words
        self.nei = NeiEvidence(docs, idf, seed, max_words)

    def make(self, cand: Candidate, rng: random.Random) -> tuple[str, str] | None:
        """(claim, evidence) of a candidate, or None if it cannot be completed."""
        doc = self.docs[cand.doc]
        claim: str | None = cand.claim
        if cand.edit_type in SWAP_TYPES and cand.span:
            claim = swapped_claim(cand.claim, cand.span, doc, self.pools[cand.edit_type], rng)
            if claim is None:
                return None
        if cand.edit_type in NEI_TYPES:
            return self.nei.make(cand, claim, rng)
        evidence = _window(doc, cand.lo, cand.hi, rng, self.max_words)
        return (claim, evidence) if evidence else None


class _Accepted:
    """The pairs accepted so far, and the counts of those dropped (incomplete, duplicate,
    leaking into an evaluation set)."""

    def __init__(self, docs: Sequence[Document], leakage: LeakageIndex) -> None:
        self.docs = docs
        self.leakage = leakage
        self.leak_counts: dict[str, Counter[str]] = {name: Counter() for name in leakage.names}
        self.hashes: set[str] = set()
        self.dropped: Counter[str] = Counter()
        self.pairs: list[CorpusPair] = []

    def take(
        self, cand: Candidate, result: tuple[str, str] | None, label: str, generator: str
    ) -> bool:
        """Accept the completed candidate as a pair unless it is dropped; True if accepted."""
        t = cand.edit_type
        if result is None:
            self.dropped[f"incomplete:{t}"] += 1
            return False
        claim, evidence = result
        key = _hash(normalize(claim) + "\x00" + normalize(evidence))
        if key in self.hashes:
            self.dropped["duplicate"] += 1
            return False
        if self._leaks(claim, evidence):
            self.dropped["leakage"] += 1
            return False
        self.hashes.add(key)
        doc = self.docs[cand.doc]
        self.pairs.append(
            CorpusPair(
                id=f"{t}:{doc.source}:{doc.doc_id}:{cand.lo}:{len(self.pairs)}",
                claim=claim,
                evidence=evidence,
                label=label,
                generator=generator,
                edit_type=t,
                source=doc.source,
                doc_id=doc.doc_id,
                group=doc.group,
            )
        )
        return True

    def _leaks(self, claim: str, evidence: str) -> bool:
        hits_c = self.leakage.check(claim)
        hits_e = self.leakage.check(evidence)
        for name, kind in hits_c.items():
            self.leak_counts[name][f"claim_{kind}"] += 1
        for name, kind in hits_e.items():
            self.leak_counts[name][f"evidence_{kind}"] += 1
        return bool(hits_c or hits_e)


def _water_fill(total: int, available: dict[str, int]) -> dict[str, int]:
    """Split ``total`` over types as evenly as their availability allows."""
    quota = dict.fromkeys(available, 0)
    left = total
    open_types = [t for t in available if available[t] > 0]
    while left > 0 and open_types:
        share = max(1, left // len(open_types))
        for t in list(open_types):
            give = min(share, available[t] - quota[t], left)
            quota[t] += give
            left -= give
            if quota[t] >= available[t]:
                open_types.remove(t)
            if left <= 0:
                break
    return quota


@dataclass
class BuildResult:
    """The pairs and what it took to make them."""

    pairs: list[CorpusPair]
    report: dict


def _fill_label(
    label: str,
    need: int,
    cands: dict[str, list[Candidate]],
    builder: _Builder,
    kept: _Accepted,
    seed: int,
) -> None:
    """Up to ``need`` pairs of ``label``, its edit types' quotas water-filled by availability."""
    generator, types = FAMILIES[label]
    pools = {}
    for t in types:
        pool = list(cands[t])
        random.Random(f"{seed}:{t}").shuffle(pool)
        pools[t] = pool
    cursor = dict.fromkeys(types, 0)
    made = dict.fromkeys(types, 0)
    while need > 0:
        available = {t: len(pools[t]) - cursor[t] for t in types}
        if not any(available.values()):
            break
        quota = _water_fill(need, available)
        for t in types:
            rng = random.Random(f"{seed}:{t}:{cursor[t]}")
            goal = made[t] + quota[t]
            while made[t] < goal and cursor[t] < len(pools[t]):
                cand = pools[t][cursor[t]]
                cursor[t] += 1
                if kept.take(cand, builder.make(cand, rng), label, generator):
                    made[t] += 1
                    need -= 1


def _quotas(size: int, cap_factor: float) -> tuple[dict[str, int], dict[str, int]]:
    """Pairs wanted per label (a third each) and the candidates kept per edit type
    (``cap_factor`` times the type's share of its label, plus 50)."""
    per_label = {label: size // 3 + (1 if i < size % 3 else 0) for i, label in enumerate(LABELS)}
    caps: dict[str, int] = {}
    for label, (_, types) in FAMILIES.items():
        for t in types:
            caps[t] = int(cap_factor * per_label[label] / len(types)) + 50
    return per_label, caps


def build_corpus(
    docs: Sequence[Document],
    lex: Lexicons,
    size: int = 200_000,
    seed: int = 0,
    eval_sets: dict[str, Sequence[str]] | None = None,
    max_words: int = 200,
    cap_factor: float = 3.0,
    max_repeats: int = 8,
) -> BuildResult:
    """About ``size`` pairs, a third per label, balanced across each family's edit types.

    Pairs duplicating another pair (normalised claim + evidence) or any text of ``eval_sets``
    (see :class:`LeakageIndex`) are dropped and counted. Sentences repeated (up to numbers and
    the document's focus name) in more than ``max_repeats`` documents are dropped first as
    boilerplate. Deterministic for ``seed``.
    """
    started = time.monotonic()
    docs = drop_boilerplate(list(docs), max_repeats)
    idf = document_idf(docs)
    per_label, caps = _quotas(size, cap_factor)
    cands, seen_drugs, seen_conditions = _candidates(docs, lex, caps, seed)
    builder = _Builder(docs, seen_drugs, seen_conditions, idf, seed, max_words)
    kept = _Accepted(docs, LeakageIndex(eval_sets or {}))
    for label in FAMILIES:
        _fill_label(label, per_label[label], cands, builder, kept, seed)
    random.Random(f"{seed}:order").shuffle(kept.pairs)
    report = {
        "size": len(kept.pairs),
        "requested": size,
        "seed": seed,
        "documents": len(docs),
        "documents_by_source": dict(sorted(Counter(d.source for d in docs).items())),
        "lexicons": {
            "drugs": len(lex.drugs),
            "drugs_seen_in_corpus": len(seen_drugs),
            "conditions": len(lex.conditions),
            "conditions_seen_in_corpus": len(seen_conditions),
        },
        "candidates": {t: len(c) for t, c in cands.items()},
        "candidate_caps": caps,
        **count_table(kept.pairs),
        "dropped": dict(sorted(kept.dropped.items())),
        "leakage": {name: dict(sorted(c.items())) for name, c in kept.leak_counts.items()},
        "seconds": round(time.monotonic() - started, 1),
    }
    return BuildResult(kept.pairs, report)
