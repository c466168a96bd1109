"""Verification of an answer's claims against its sources: which claim-source pairs to
judge, the passages the judge reads for each, and the per-claim outcome.

Pairing ``all`` (the paper's definition) judges every claim against every valid source;
``cited`` only against the sources its markers name (a label matches ``Source.id`` or the
source's URL). A claim with no pair to judge is unsupported (``supported=False``), a pair
the judge failed on is unscored, never unsupported (see :mod:`medverify.audit.records`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Literal

from medverify.audit.cited_urls import normalize_url
from medverify.audit.metrics import claim_supported
from medverify.audit.records import ClaimAudit, PairJudgement, SupportLabel
from medverify.audit.select import PassageSelector, Selected
from medverify.judge import Judge, JudgeItem
from medverify.records import Claim, Source, Verdict

log = logging.getLogger(__name__)

Pairing = Literal["all", "cited"]
PAIR_SEPARATOR = "@"


def resolve_markers(markers: Sequence[str], sources: Sequence[Source]) -> list[str]:
    """Ids of the sources that ``markers`` name (by id, or by URL), in marker order."""
    by_key: dict[str, str] = {}
    for source in sources:
        by_key.setdefault(source.id, source.id)
        for url in (source.url, source.final_url):
            if url:
                by_key.setdefault(normalize_url(url) or url, source.id)
    found = []
    for marker in markers:
        key = marker if marker in by_key else normalize_url(marker) or marker
        if key in by_key:
            found.append(by_key[key])
    return list(dict.fromkeys(found))


def pair_sources(claim: Claim, sources: Sequence[Source], pairing: Pairing) -> list[Source]:
    """The valid sources ``claim`` is to be judged against."""
    valid = [s for s in sources if s.valid]
    if pairing == "all":
        return valid
    cited = set(resolve_markers(claim.markers, sources))
    return [s for s in valid if s.id in cited]


class PairVerifier:
    """Judge every claim-source pair of an answer on selected passages."""

    def __init__(
        self,
        judge: Judge,
        selector: PassageSelector,
        *,
        pairing: Pairing = "all",
        batch_size: int = 64,
    ) -> None:
        self.judge = judge
        self.selector = selector
        self.pairing = pairing
        self.batch_size = batch_size

    async def verify(
        self,
        claims: Sequence[Claim],
        sources: Sequence[Source],
        gold: Sequence[SupportLabel | None] | None = None,
    ) -> list[ClaimAudit]:
        """One :class:`ClaimAudit` per claim, in order. ``gold`` labels (same order as
        ``claims``) are carried into the audits."""
        pairs = [(c, s) for c in claims for s in pair_sources(c, sources, self.pairing)]
        selected = await asyncio.to_thread(self.selector.select_pairs, pairs) if pairs else []
        judged = await self._judge_all(pairs, selected)
        by_claim: dict[str, list[PairJudgement]] = {c.id: [] for c in claims}
        for pair in judged:
            by_claim[pair.claim_id].append(pair)
        labels = list(gold) if gold is not None else [None] * len(claims)
        return [
            claim_audit(claim, by_claim[claim.id], sources, label)
            for claim, label in zip(claims, labels, strict=True)
        ]

    async def _judge_all(
        self, pairs: Sequence[tuple[Claim, Source]], selected: Sequence[Selected]
    ) -> list[PairJudgement]:
        out: list[PairJudgement] = []
        for start in range(0, len(pairs), self.batch_size):
            part = pairs[start : start + self.batch_size]
            chosen = selected[start : start + self.batch_size]
            verdicts = await self._judge_batch(part, chosen)
            out.extend(
                PairJudgement(
                    claim_id=claim.id,
                    source_id=source.id,
                    passages=sel.passages,
                    verdict=verdict,
                    input_tokens=sel.input_tokens,
                    source_tokens=sel.source_tokens,
                )
                for (claim, source), sel, verdict in zip(part, chosen, verdicts, strict=True)
            )
        return out

    async def _judge_batch(
        self, pairs: Sequence[tuple[Claim, Source]], selected: Sequence[Selected]
    ) -> list[Verdict]:
        """Verdicts for one batch of pairs, with the claim ids restored. Each pair is judged
        under a unique id (``claim@source``) so judges that key by claim id keep them apart."""
        items = [
            JudgeItem(claim=_pair_claim(claim, source), passages=sel.passages)
            for (claim, source), sel in zip(pairs, selected, strict=True)
        ]
        try:
            verdicts = await self.judge.judge(items)
        except Exception as exc:  # a judge must not raise; if it does, the pairs are unscored
            log.warning("judge failed on %d pairs: %s", len(items), exc)
            error = f"judge failed: {type(exc).__name__}: {exc}"
            verdicts = [_failed(item, error) for item in items]
        if len(verdicts) != len(items):
            error = f"judge returned {len(verdicts)} verdicts for {len(items)} pairs"
            verdicts = [_failed(item, error) for item in items]
        return [
            v.model_copy(update={"claim_id": claim.id})
            for v, (claim, _) in zip(verdicts, pairs, strict=True)
        ]


def claim_audit(
    claim: Claim,
    pairs: list[PairJudgement],
    sources: Sequence[Source],
    gold: SupportLabel | None = None,
) -> ClaimAudit:
    """A claim's audit from its judged pairs (the ``supported`` rule of ClaimAudit)."""
    supported = claim_supported(pairs)
    failed = [p.verdict.error or "no verdict" for p in pairs if p.supported is None]
    error = None
    if supported is None and failed:
        error = f"{len(failed)} of {len(pairs)} pairs could not be judged: {failed[0]}"
    return ClaimAudit(
        claim=claim,
        gold=gold,
        cited_source_ids=resolve_markers(claim.markers, sources),
        pairs=pairs,
        supported=supported,
        supporting_source_ids=[p.source_id for p in pairs if p.supported],
        error=error,
    )


def _pair_claim(claim: Claim, source: Source) -> Claim:
    return claim.model_copy(update={"id": f"{claim.id}{PAIR_SEPARATOR}{source.id}"})


def _failed(item: JudgeItem, error: str) -> Verdict:
    return Verdict(
        claim_id=item.claim.id, passage_ids=[p.id for p in item.passages], error=error
    )
