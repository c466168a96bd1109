"""Reviewed means settled: a claim checked again that a clinician has already decided.

A claim matches a closed review item when, in the same knowledge-base lineage
(:attr:`medverify.kb.KnowledgeBase.lineage`), its text is the item's claim once normalised
(:func:`claim_key`: lower case, words only), or a near-duplicate of it
(:func:`near_duplicate`: word-sequence similarity >= ``[review] near_duplicate``, default
0.9, with the same key content words, numbers, negation and hedging both ways, and no
other word that changes the meaning, so "Statins lower LDL" never matches "Statins do not
lower LDL" or "Statins lower LDL by 50%", nor "most effective" "least effective"). The
claim then gets the reviewer's label and a reviewed decision
(:func:`medverify.arbitration.settled_by_review`, rule ``reviewed``: never escalated, so
never queued again) with its provenance (:class:`~medverify.records.Reviewed`: item,
label, reviewer, time, correction, source).

Several matching items: the most recently closed one decides. **Newer reviewed evidence
wins**: when the judge's deciding passage is a document taught from a review item closed
after the matching one and the judge's category differs from the matching label, the
claim is not settled (the judge's verdict stands, with a warning naming both items), so a
later correction is never hidden by an older label; never for a FACT the judge is not
sure of, since a taught passage that does not state the claim settles nothing. An item
closed ``CANNOT_TELL`` settles nothing, nor does an item whose KB change an admin
reverted; items from before the run store recorded a KB lineage (version 11) settle
nothing.

:class:`SettledIndex` holds the closed items of one lineage (normalised texts and labels,
not the items), indexed by text and by the key content a near-duplicate must share, so a
claim is compared word by word only with items of the same key content; a checker keeps it
across runs and adds newly closed items (a revert rebuilds it). :class:`SettledClaims`
reads the matching item's labels only when a claim matches.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Protocol

from medverify.arbitration import settled_by_review
from medverify.config import ArbitrationPolicy
from medverify.records import Category, ClaimResult, Reviewed
from medverify.review.records import ReviewItem, ReviewLabel
from medverify.review.teaching import DOC_PREFIX
from medverify.review.workflow import deciding_label
from medverify.terms import key_terms, meaning_differences

NEAR_DUPLICATE = 0.9
"""Default word-sequence similarity (difflib ratio over the normalised words) from which a
claim is the reviewed claim restated (``[review] near_duplicate``)."""

MIN_NEAR_WORDS = 4
"""Claims shorter than this (in words) match only by their exact normalised text."""

_WORD = re.compile(r"\w+", re.UNICODE)


def claim_key(text: str) -> str:
    """A claim's text normalised for matching: lower case, its words joined by one space
    (punctuation, case and spacing do not make another claim)."""
    return " ".join(_WORD.findall(text.casefold()))


@lru_cache(maxsize=4096)
def _shape(key: str) -> tuple[frozenset[str], frozenset[str], bool, bool]:
    terms = key_terms(key)
    return terms.content, terms.numbers, terms.negated, terms.hedged


def near_duplicate(a: str, b: str, threshold: float = NEAR_DUPLICATE) -> float | None:
    """The similarity of two normalised claim texts when one restates the other (ratio
    >= ``threshold`` and the same key content, numbers, negation and hedging); None
    otherwise, and for texts under :data:`MIN_NEAR_WORDS` words."""
    wa, wb = a.split(), b.split()
    if min(len(wa), len(wb)) < MIN_NEAR_WORDS or abs(len(wa) - len(wb)) > max(3, len(wa) // 4):
        return None
    if _shape(a) != _shape(b) or meaning_differences(a, b):
        return None
    ratio = difflib.SequenceMatcher(None, wa, wb, autojunk=False).ratio()
    return ratio if ratio >= threshold else None


@dataclass(frozen=True)
class SettledRow:
    """A closed review item as matching needs it."""

    item_id: str
    claim_key: str
    label: ReviewLabel
    closed_at: datetime


class SettledLedger(Protocol):
    """What matching needs of the review store
    (:class:`medverify.store.review.ReviewStore` is one)."""

    def settled(self, kb_lineage: str, since: datetime | None = None) -> list[SettledRow]:
        """The closed items of one KB lineage (closed after ``since``, when given)."""
        ...

    def settled_version(self, kb_lineage: str) -> tuple[object, ...]:
        """Changes whenever the closed items of the lineage change (closed, reverted)."""
        ...

    def get(self, item_id: str) -> ReviewItem:
        """One item with its labels."""
        ...


@dataclass(frozen=True)
class Match:
    """A claim's matching closed item."""

    row: SettledRow
    match: str  # "same_text" | "near_duplicate"
    similarity: float


@dataclass
class SettledIndex:
    """The closed items of one lineage, by normalised text and by :func:`_shape` (a
    near-duplicate has the same shape, so only those are compared word by word). Items
    are added as they close; a revert (or anything else that removes) rebuilds it."""

    version: tuple[object, ...] = ()
    newest: datetime | None = None
    by_id: dict[str, SettledRow] = field(default_factory=dict)
    by_key: dict[str, SettledRow] = field(default_factory=dict)
    by_shape: dict[tuple[object, ...], list[SettledRow]] = field(default_factory=dict)

    def add(self, rows: Sequence[SettledRow]) -> None:
        for row in rows:
            if row.label is ReviewLabel.CANNOT_TELL or row.item_id in self.by_id:
                continue
            self.by_id[row.item_id] = row
            if self.newest is None or row.closed_at > self.newest:
                self.newest = row.closed_at
            known = self.by_key.get(row.claim_key)
            if known is None or _later(row, known):
                self.by_key[row.claim_key] = row
            self.by_shape.setdefault(_shape(row.claim_key), []).append(row)

    def match(self, text: str, near: float = NEAR_DUPLICATE) -> Match | None:
        """The most recently closed item this claim text matches, if any."""
        key = claim_key(text)
        best = self.by_key.get(key)
        found = Match(best, "same_text", 1.0) if best is not None else None
        for row in self.by_shape.get(_shape(key), ()):
            if row.claim_key == key or (found is not None and not _later(row, found.row)):
                continue
            similarity = near_duplicate(key, row.claim_key, near)
            if similarity is not None:
                found = Match(row, "near_duplicate", round(similarity, 4))
        return found

    @classmethod
    def current(cls, ledger: SettledLedger, kb_lineage: str,
                index: SettledIndex | None = None) -> SettledIndex:
        """``index`` brought up to date: as it is when nothing changed, with the newly
        closed items added when only items closed, rebuilt otherwise."""
        version = ledger.settled_version(kb_lineage)
        if index is not None and index.version == version:
            return index
        if index is not None and _only_closed_more(index.version, version):
            index.add(ledger.settled(kb_lineage, since=index.newest))
        else:
            index = cls()
            index.add(ledger.settled(kb_lineage))
        index.version = version
        return index


def _later(a: SettledRow, b: SettledRow) -> bool:
    return (a.closed_at, a.item_id) > (b.closed_at, b.item_id)


def _only_closed_more(old: tuple[object, ...], new: tuple[object, ...]) -> bool:
    """Versions are (items closed, last closing time, changes reverted): true when only
    the first two grew."""
    return (len(old) == len(new) == 3 and old[2] == new[2]
            and isinstance(old[0], int) and isinstance(new[0], int) and new[0] > old[0])


class SettledClaims:
    """Checked claims matched against the closed review items of one KB lineage and
    settled by them (``index``: the items, kept by the caller across runs)."""

    def __init__(self, ledger: SettledLedger, kb_lineage: str,
                 near: float = NEAR_DUPLICATE, index: SettledIndex | None = None) -> None:
        self.ledger, self.near = ledger, near
        self.index = SettledIndex.current(ledger, kb_lineage, index)

    def __len__(self) -> int:
        return len(self.index.by_id)

    def match(self, text: str) -> Match | None:
        """The most recently closed item this claim text matches, if any."""
        return self.index.match(text, self.near)

    def reviewed(self, found: Match, result: ClaimResult) -> Reviewed | None:
        """The provenance of a match (None when the item has no settling label)."""
        item = self.ledger.get(found.row.item_id)
        label = deciding_label(item)
        if label is None or label.label is ReviewLabel.CANNOT_TELL:
            return None
        decided = result.arbitration
        return Reviewed(
            item_id=item.id, label=Category(label.label.value), reviewer=label.reviewer,
            reviewed_at=label.created_at, label_id=label.id, correction=label.correction,
            source_url=label.source_url, match=found.match,  # type: ignore[arg-type]
            similarity=found.similarity, reviewed_claim=item.claim.text,
            category_before=result.category,
            decision_before=decided.decision if decided else None,
            rule_before=decided.rule if decided else None)

    def newer_disagreement(self, found: Match, result: ClaimResult) -> SettledRow | None:
        """The review item behind the judge's deciding passage when it was closed after the
        matching one and the judge's category is not the matching label; never toward a FACT
        the judge is not sure of (a taught passage that does not state the claim settles
        nothing, so it cannot overrule a clinician's label of this claim into an ACCEPT:
        docs/judges.md, "Taught documents")."""
        if result.category is Category.FACT and result.confident is not True:
            return None
        passage = next((p for p in result.passages if p.id == result.evidence_passage_id), None)
        if passage is None or not passage.doc_id.startswith(DOC_PREFIX):
            return None
        newer = self.index.by_id.get(passage.doc_id[len(DOC_PREFIX):])
        if newer is None or newer.closed_at <= found.row.closed_at:
            return None
        return None if result.category.value == found.row.label.value else newer

    def settle(self, result: ClaimResult, policy: ArbitrationPolicy) -> ClaimResult:
        """The claim's result: the reviewed decision when it matches a closed item (see
        the module's docstring), else as the judge and the rules decided."""
        found = self.match(result.claim.text)
        if found is None:
            return result
        newer = self.newer_disagreement(found, result)
        if newer is not None:
            note = (f"review item {found.row.item_id} labelled this claim "
                    f"{found.row.label.value}; a later review (item {newer.item_id}) taught "
                    f"evidence on which the judge says {result.category.value}: the judge's "
                    "verdict stands")
            return result.model_copy(update={"warnings": [*result.warnings, note]})
        reviewed = self.reviewed(found, result)
        return result if reviewed is None else settled_by_review(result, reviewed, policy)

    def settle_all(self, results: Sequence[ClaimResult],
                   policy: ArbitrationPolicy) -> list[ClaimResult]:
        return [self.settle(r, policy) for r in results]
