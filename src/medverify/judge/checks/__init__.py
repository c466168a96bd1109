"""Exact checks: cheap text comparisons of a claim with a passage said to support it.

Judges (the built-in cross-encoder, an LLM) often call a claim supported when the passage
says something close but different: another dose, the negation, the opposite direction,
another group of patients, another drug, another frequency word or disease.
:func:`find_conflicts` compares the claim with
the sentences of the passage that are about it (:func:`medverify.judge.checks.text.align`)
and reports each difference as a :class:`~medverify.records.CheckFinding`:

- NUMBER (veto, :mod:`~medverify.judge.checks.numbers`): a dose, interval, frequency, age,
  percentage or count of the claim that the passage states nowhere, while an aligned
  sentence states the same kind of quantity with another value;
- NEGATION (veto): a negation in one text governs a word the other affirms ("vaccines do
  not cause autism" vs "vaccines cause autism"); a hedged ("may not") or "without"
  negation gives a finding without veto;
- DIRECTION (veto on curated axes, :mod:`~medverify.judge.checks.words`): increase vs
  decrease, improves vs worsens, ... acting on the same thing;
- POPULATION (veto only for a passage restricted to a group that cannot overlap the
  claim's, a diabetes type or pregnancy status): children vs adults, men vs women, ...;
- DRUG (never a veto): another drug named where the claim's should be;
- FREQUENCY (veto across the scale, :mod:`~medverify.judge.checks.frequency`): "rarely"
  vs "common", "seldom" vs "usually", "never" vs "sometimes", about the same thing;
- ENTITY (veto only in the same place, :mod:`~medverify.judge.checks.entities`): another
  disease, microbe, animal, cancer or vaccine where the claim's should be.

NUMBER reads counts and frequencies as people write them (:mod:`~medverify.judge.checks.counts`):
"a single dose", "by half", "taken daily", "every other day", rates compared per day.

A veto stops that passage's support from counting; a finding without veto marks the verdict
not confident. The checks never make a claim FACT. They favour precision: when unsure they
report nothing. Measured false-veto rates are in ``docs/exact_checks.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from medverify.judge.checks.entities import entity_findings
from medverify.judge.checks.frequency import frequency_findings
from medverify.judge.checks.numbers import number_findings
from medverify.judge.checks.text import (
    AUX,
    CLAUSE_PUNCT,
    Alignment,
    Cue,
    Doc,
    align,
    parse,
    stem,
)
from medverify.judge.checks.words import (
    CATEGORY,
    DIRECTIONS,
    GROUPS,
    PHRASAL,
    direction_findings,
    drug_findings,
    population_findings,
    wordnet_antonyms,
)
from medverify.records import CheckFinding, CheckKind

__all__ = ["MAX_CLAIM_CHARS", "MAX_PASSAGE_CHARS", "find_conflicts"]

_log = logging.getLogger(__name__)

MAX_CLAIM_CHARS = 5_000
"""Longer claims are not one claim: they get no findings."""
MAX_PASSAGE_CHARS = 200_000
"""Longer passages get no findings (the checks stay linear, but a passage this long is not
one passage of a knowledge base)."""
ALIGN_CLASSES = {
    **{stem(w): f"pop:{CATEGORY[g]}" for w, gs in GROUPS.items() for g in gs[:1]},
    **{s: f"dir:{axis}" for s, (axis, _) in DIRECTIONS.items()},
    **{s: f"dir:{axis}" for (s, _), (axis, _) in PHRASAL.items()},
}
"""Words that may differ between a claim and its aligned sentence (direction words, groups
of people): any word of the same class counts as present when aligning."""
_WEAK_CUES = frozenset({"without"})


def find_conflicts(claim: str, passage_text: str, passage_id: str | None = None,
                   ) -> list[CheckFinding]:
    """Differences between the claim and the part of the passage that is about it."""
    try:
        return conflicts(claim, passage_text, passage_id)
    except Exception as exc:  # advice only: a failing check must never fail the judge
        _log.warning("exact checks skipped for passage %s: %s", passage_id, type(exc).__name__)
        return []


def conflicts(claim: str, passage_text: str, passage_id: str | None = None,
              ) -> list[CheckFinding]:
    """:func:`find_conflicts` without its guard (tests call this to see any error)."""
    if not isinstance(claim, str) or not isinstance(passage_text, str):
        return []
    if len(claim) > MAX_CLAIM_CHARS or len(passage_text) > MAX_PASSAGE_CHARS:
        return []
    if not claim.strip() or not passage_text.strip():
        return []
    claim_doc = parse(claim)
    local, alignment = align(claim_doc, passage_text, ALIGN_CLASSES)
    if not alignment.sentences:
        return []
    whole = _Whole(passage_text)
    antonyms = wordnet_antonyms()
    findings = [
        *number_findings(claim_doc, local, alignment, passage_id, whole),
        *negation_findings(claim_doc, local, alignment, passage_id, whole),
        *direction_findings(claim_doc, local, alignment, passage_id, antonyms, whole),
        *population_findings(claim_doc, local, alignment, passage_id, whole),
        *drug_findings(claim_doc, local, alignment, passage_id),
        *frequency_findings(claim_doc, local, alignment, passage_id, whole),
        *entity_findings(claim_doc, local, alignment, passage_id, whole),
    ]
    unique: dict[tuple[str, str, str], CheckFinding] = {}
    for finding in findings:
        unique.setdefault((finding.kind, finding.claim_says, finding.passage_says), finding)
    return list(unique.values())


class _Whole:
    """The whole passage, tokenized on first call (most claims never need it)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.doc: Doc | None = None

    def __call__(self) -> Doc:
        if self.doc is None:
            self.doc = parse(self.text)
        return self.doc


# --------------------------------------------------------------------------- negation


def _polarity(doc: Doc, word: str, a: int, b: int) -> set[bool]:
    """The polarities (True: negated) of the occurrences of stem ``word`` in ``[a, b)``."""
    return {doc.negated[i] for i in range(a, b) if doc.stems[i] == word}


def negation_findings(claim: Doc, passage: Doc, alignment: Alignment,
                      passage_id: str | None, whole: Callable[[], Doc]) -> list[CheckFinding]:
    """A finding when a negation in an aligned sentence governs words the claim affirms, or
    a negation in the claim governs words an aligned sentence affirms, and no aligned
    sentence uses any of them as the claim does (nor any passage sentence all of them). The
    governed words are the first two content words of the negation's scope; both must
    appear on the other side. Hedged ("may not"),
    elliptic ("but not"), "without" and "with no" negations give findings without veto;
    subordinate ones ("patients who did not ...") none."""
    candidates: list[tuple[Cue, bool]] = [
        (c, False) for a, b in alignment.sentences for c in passage.cues
        if a <= c.at < b and c.governs is not None and not c.subordinate]
    candidates.extend((c, True) for c in claim.cues
                      if c.governs is not None and not c.subordinate)
    findings, seen = [], set()
    for cue, claim_negates in candidates:
        doc = claim if claim_negates else passage
        governed = [doc.stems[k] for k in (cue.governs, cue.second) if k is not None]
        if governed[0] in seen:
            continue
        spot = _flipped(claim, passage, alignment, governed, claim_negates)
        if spot is None:
            continue
        if claim_negates and cue.relations and not all(
                _polarity(passage, r, *spot) == {False} for r in cue.relations):
            continue
        if _agrees_somewhere(whole(), governed, claim_negates):
            continue
        seen.add(governed[0])
        findings.append(_negation_finding(claim, passage, cue, claim_negates, governed[0], spot,
                                          passage_id))
    return findings


def _flipped(claim: Doc, passage: Doc, alignment: Alignment, governed: list[str],
             claim_negates: bool) -> tuple[int, int] | None:
    """The first aligned sentence where every governed word has the opposite polarity to
    the claim's, provided no aligned sentence has any of them with the claim's polarity."""
    whole = (0, len(claim.toks))
    if any(_polarity(claim, word, *whole) != {claim_negates} for word in governed):
        return None
    if any(_polarity(passage, word, a, b) & {claim_negates}
           for word in governed for a, b in alignment.sentences):
        return None
    return next(((a, b) for a, b in alignment.sentences
                 if all(_polarity(passage, word, a, b) == {not claim_negates}
                        for word in governed)), None)


def _agrees_somewhere(doc: Doc, governed: list[str], claim_negates: bool) -> bool:
    """Does some sentence of the passage use every governed word as the claim does?"""
    return any(all(claim_negates in _polarity(doc, word, a, b) for word in governed)
               for a, b in doc.sents)


def _negation_finding(claim: Doc, passage: Doc, cue: Cue, claim_negates: bool, word: str,
                      spot: tuple[int, int], passage_id: str | None) -> CheckFinding:
    if claim_negates:
        says = _cue_text(claim, cue)
        stated = _word_text(passage, word, *spot)
    else:
        says = _word_text(claim, word, 0, len(claim.toks))
        stated = _cue_text(passage, cue)
    doc = claim if claim_negates else passage
    veto = not (cue.hedged or cue.elliptic or doc.low[cue.at] in _WEAK_CUES
                or _after_with(doc, cue))
    return CheckFinding(kind=CheckKind.NEGATION, veto=veto, passage_id=passage_id,
                        claim_says=says, passage_says=stated,
                        reason=f"the claim says {says}; the passage says {stated}")


def _after_with(doc: Doc, cue: Cue) -> bool:
    """"with no ..." describes a group ("patients with no history of"), not a predicate."""
    return cue.at > 0 and doc.low[cue.at] == "no" and doc.low[cue.at - 1] == "with"


def _cue_text(doc: Doc, cue: Cue) -> str:
    start = cue.at
    while start > 0 and doc.low[start - 1] in AUX and cue.at - start < 2:
        start -= 1
    governs = cue.governs if cue.governs is not None else cue.at
    return doc.span(start, min(cue.end, governs + 6))


def _word_text(doc: Doc, word: str, a: int, b: int) -> str:
    at = next(i for i in range(a, b) if doc.stems[i] == word)
    start = at
    while start > a and doc.low[start - 1] in AUX and at - start < 3:
        start -= 1
    end = at + 1
    while end < min(b, at + 6) and doc.low[end] not in CLAUSE_PUNCT:
        end += 1
    return doc.span(start, end)
