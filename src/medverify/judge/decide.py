"""How one claim's verdict is decided from several passages, and how sure it is.

The built-in judge scores every (claim, passage) pair; this module turns those per-passage
scores into the claim's two analyses, its category and its confidence. The rule, in order:

1. **Relevance.** Each passage is weighted by how much of the claim's key content it holds
   (numbers and names count double; :func:`medverify.terms.coverage`). A passage under
   :data:`MIN_RELEVANCE` is about another subject: it can never contradict the claim, and
   support from it is never confident.
2. **Exact checks** (:mod:`medverify.judge.checks`) run on every passage that would support
   the claim. A veto (another number, a negation, the opposite direction) removes that
   passage's support; other findings keep it but make the verdict not sure.
3. **A passage that states the claim** (word for word, or nearly with the same numbers and
   negation) settles support.
4. **Clinician-reviewed passages** (documents taught from the review queue) outrank
   unreviewed text only on the claim they were taught for. A taught passage settles
   *support* only for a claim it states (:func:`states_claim`: the same key content words,
   numbers, negation, hedging and population); it outranks a *contradiction* only when it
   holds at least :data:`STRONG_RELEVANCE` of the claim's key content. For any other claim
   it is ordinary evidence (the invariant in docs/judges.md, "Taught documents").
5. **JUDGMENT_ERROR only when strong, relevant evidence points both ways**: each side's
   best passage is relevant (:data:`STRONG_RELEVANCE`) and confident on its own (its
   calibrated probability reaches the family's confident threshold, or without calibration
   its raw one :data:`STRONG_P`; a statement of the claim or a reviewed passage is
   strong). Otherwise the side with the larger weighted score wins and the other is
   recorded as outweighed, which makes the verdict not sure.

Confidence is the calibrated probability (:mod:`medverify.judge.calibration`) of the
category's label for the deciding passage. A verdict is confident only when that reaches
the family's threshold for the category (or a statement / reviewed passage settled it) and
nothing above made it doubtful; otherwise it keeps its category with ``confident=False``
and ``not_sure`` saying why. A FACT is confident only when its deciding passage covers the
claim's key content: every number, name and content word of the claim (or a synonym of
:data:`medverify.terms.SYNONYMS`) is in it (:func:`uncovered`).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field

from medverify.judge.calibration import TARGETS, Family
from medverify.judge.checks import find_conflicts
from medverify.records import Analysis, CheckFinding, Passage, Verdict
from medverify.terms import (
    MIN_RELEVANCE,
    STRONG_RELEVANCE,
    coverage,
    covered_items,
    fold,
    key_items,
    key_terms,
    meaning_differences,
    number_value,
    subject,
    synonyms,
    tokens,
)
from medverify.text import line_sentences

STRONG_P = 0.5  # ... and be at least this probable on its own
NEAR_VERBATIM = 0.9  # word-sequence similarity at which a sentence states the claim
REVIEWED_SOURCES = frozenset({"clinician-review"})  # Passage.source of taught documents

SUPPORT, CONTRADICT, NEI = 0, 1, 2


@dataclass
class PassageScore:
    """What the judge knows about one passage for one claim."""

    passage: Passage
    raw: Sequence[float]  # the verifier's (S, C, N) probabilities
    calibrated: Sequence[float] | None  # the calibrated ones (None: no calibration)
    label: int | None  # the per-passage decision on the raw probabilities
    relevance: float
    states_claim: bool
    findings: list[CheckFinding] = field(default_factory=list)
    verbatim: bool = False  # the claim is one or more whole sentences of the passage

    @property
    def taught(self) -> bool:
        """A clinician-taught document (from the review queue), whatever it says."""
        return (self.passage.source or "") in REVIEWED_SOURCES

    def reviewed(self, side: int) -> bool:
        """A taught passage that outranks unreviewed text on ``side``: for support, only
        when it states the claim; for contradiction, when it holds at least
        :data:`STRONG_RELEVANCE` of the claim's key content. Otherwise it counts as any
        passage (it cannot spread a label to a claim the reviewer never saw)."""
        if not self.taught:
            return False
        if side == SUPPORT:
            return self.states_claim
        return self.relevance >= STRONG_RELEVANCE

    @property
    def vetoed(self) -> bool:
        return any(f.veto for f in self.findings)

    def strength(self, side: int) -> float:
        """The passage's weight for one side: probability x relevance (1 if it states
        the claim and the side is support)."""
        if side == SUPPORT and self.states_claim:
            return 1.0 + self.relevance
        return float(self.raw[side]) * self.relevance

    def strong(self, side: int, at: Sequence[float | None] | None = None) -> bool:
        """Evidence that can stand on its own: a statement of the claim or a reviewed
        passage; else a relevant passage whose calibrated probability of the side reaches
        the family's confident threshold (``at``: support, contradiction; None: that side
        never does), or, without calibration, whose raw probability is >= STRONG_P."""
        if self.reviewed(side) or (side == SUPPORT and self.states_claim):
            return True
        if self.relevance < STRONG_RELEVANCE:
            return False
        if at is None or self.calibrated is None:
            return float(self.raw[side]) >= STRONG_P
        threshold = at[side]
        return threshold is not None and float(self.calibrated[side]) >= threshold


def off_support_findings(claim: str, passage_text: str,
                         findings: list[CheckFinding]) -> list[CheckFinding]:
    """The findings of a passage that does not support the claim but is on its point (they
    tell arbitration the claim is likely wrong): only vetoes, and only where the passage
    sentence that says otherwise names the claim's subject (:func:`subject`: "Squirrels ...
    are a common cause" against "squirrels ... are almost never infected"), not "Statins
    lower LDL" against "saturated fat can raise your LDL". Findings without veto of such a
    passage would change nothing and are left out."""
    head = subject(claim)
    if head is None:
        return []
    sentences = line_sentences(passage_text)[:200]
    out = []
    for finding in findings:
        said = finding.passage_says or ""
        where = next((s for s in sentences if said and said in s), "")
        if finding.veto and head in {fold(t) for t in tokens(where)}:
            out.append(finding)
    return out


def states_claim(claim: str, passage_text: str, *, verbatim: bool) -> bool:
    """True when the passage states the claim: word for word (``verbatim``), or one of its
    sentences is nearly the claim's word sequence (similarity >= :data:`NEAR_VERBATIM`)
    with the same numbers, negation and hedging, every key word of the claim in it (a
    claim that swaps "adults" for "children" is not stated, however similar), and no other
    word that changes the meaning ("most" for "least", "before" for "after":
    :func:`~medverify.terms.meaning_differences`)."""
    if verbatim:
        return True
    words = [t.casefold() for t in tokens(claim)]
    if len(words) < 4:
        return False
    ck = key_terms(claim)
    for sentence in _clauses(passage_text):
        other = [t.casefold() for t in tokens(sentence)]
        if abs(len(other) - len(words)) > max(3, len(words) // 4):
            continue
        if difflib.SequenceMatcher(None, words, other, autojunk=False).ratio() < NEAR_VERBATIM:
            continue
        sk = key_terms(sentence)
        if (sk.numbers == ck.numbers and sk.negated == ck.negated and sk.hedged == ck.hedged
                and ck.content <= sk.content and not meaning_differences(claim, sentence)):
            return True
    return False


def _clauses(passage_text: str) -> list[str]:
    """The passage's sentences and, where a sentence holds a semicolon, each of its parts
    ("Statins lower LDL in adults; the letter that says otherwise is not evidence.")."""
    out: list[str] = []
    for sentence in line_sentences(passage_text)[:200]:
        out.append(sentence)
        if ";" in sentence:
            out += [part.strip() for part in sentence.split(";") if part.strip()]
    return out


@dataclass
class Side:
    """The passages that would support (or contradict) the claim, best first."""

    side: int
    rows: list[PassageScore]

    @property
    def best(self) -> PassageScore | None:
        return self.rows[0] if self.rows else None

    def strength(self) -> float:
        return self.rows[0].strength(self.side) if self.rows else 0.0


def sides(scores: Sequence[PassageScore]) -> tuple[Side, Side, list[PassageScore]]:
    """(support, contradiction, vetoed supporters): who supports, who contradicts.

    A passage supports if it states the claim or its own label is SUPPORTED and no exact
    check vetoed it; it contradicts if its label is CONTRADICTED and it is relevant. When
    a reviewed passage (:meth:`PassageScore.reviewed`) is on one side, unreviewed passages on
    the other side drop out."""
    # a passage that states the claim (same numbers, negation, meaning words) is never
    # vetoed: a check that finds a difference there read another sentence of it
    support = [s for s in scores if s.states_claim or (s.label == SUPPORT and not s.vetoed)]
    vetoed = [s for s in scores if s.label == SUPPORT and s.vetoed and not s.states_claim]
    contra = [s for s in scores if s.label == CONTRADICT and s.relevance >= MIN_RELEVANCE
              and not s.states_claim]
    reviewed_support = any(s.reviewed(SUPPORT) for s in support)
    reviewed_contra = any(s.reviewed(CONTRADICT) for s in contra)
    if reviewed_support and not reviewed_contra:
        contra = []
    elif reviewed_contra and not reviewed_support:
        support = []
    support.sort(key=lambda s: (s.reviewed(SUPPORT), s.strength(SUPPORT)), reverse=True)
    contra.sort(key=lambda s: (s.reviewed(CONTRADICT), s.strength(CONTRADICT)), reverse=True)
    vetoed.sort(key=lambda s: s.strength(SUPPORT), reverse=True)
    return Side(SUPPORT, support), Side(CONTRADICT, contra), vetoed


@dataclass
class Outcome:
    """The two analyses' holds/passages, and the doubts collected on the way."""

    support: PassageScore | None
    contradict: PassageScore | None
    vetoed: PassageScore | None
    doubts: list[str]
    outweighed: PassageScore | None = None


def outcome_from_passages(scores: Sequence[PassageScore],
                          strong_at: Sequence[float | None] | None = None) -> Outcome:
    """Which passage decides each analysis (None: the analysis does not hold).
    ``strong_at``: the calibrated (support, contradiction) probabilities at which a passage
    is strong evidence (the family's confident thresholds; see :meth:`PassageScore.strong`)."""
    support, contra, vetoed = sides(scores)
    doubts: list[str] = []
    first_veto = vetoed[0] if vetoed and support.best is None else None
    if support.best is None or contra.best is None:
        return Outcome(support.best, contra.best, first_veto, doubts)
    s, c = support.best, contra.best
    if s.states_claim and not c.reviewed(CONTRADICT):  # a statement settles support
        if c.strong(CONTRADICT, strong_at):
            doubts.append(f"passage {_name(c.passage)} points the other way")
        return Outcome(s, None, None, doubts, outweighed=c)
    if (s.strong(SUPPORT, strong_at) and c.strong(CONTRADICT, strong_at)
            and s.reviewed(SUPPORT) == c.reviewed(CONTRADICT)):
        return Outcome(s, c, None, doubts)
    if support.strength() >= contra.strength():
        doubts.append(f"passage {_name(c.passage)} points the other way, more weakly")
        return Outcome(s, None, None, doubts, outweighed=c)
    doubts.append(f"passage {_name(s.passage)} supports the claim, more weakly")
    return Outcome(None, c, None, doubts, outweighed=s)


def _name(passage: Passage) -> str:
    return repr(passage.title or passage.doc_id)


def relevance_reason(score: PassageScore) -> str:
    return (f"passage {_name(score.passage)} holds {score.relevance:.0%} of the claim's key "
            "content")


def veto_analysis(score: PassageScore) -> Analysis:
    """The factual analysis of a claim whose only support was vetoed by an exact check."""
    reasons = "; ".join(f.reason for f in score.findings if f.veto)
    return Analysis(holds=True, passage_id=score.passage.id, vetoed=True,
                    reason=f"the verifier found support in passage {_name(score.passage)}, "
                    f"but {reasons}")


_LABEL = {"FACT": SUPPORT, "HALLUCINATION": CONTRADICT, "COVERAGE_GAP": NEI}
_NAME = {"FACT": "P(supported)", "HALLUCINATION": "P(contradicted)",
         "COVERAGE_GAP": "P(not enough information)"}


def assess(category: str, outcome: Outcome, rows: Sequence[PassageScore],
           family: Family, *, claim_negated: bool = False,
           claim: str | None = None) -> tuple[float | None, list[str]]:
    """The verdict's confidence (the calibrated probability of its category's label for the
    deciding passage) and the doubts that make it not sure (empty: confident).

    A negated claim ("X does not cause Y") is never a confident HALLUCINATION on the
    verifier's probability alone: the verifier reads negation words as contradiction (an
    exploratory count on the training sets found such verdicts much less often right than
    those of other claims; docs/judges.md). ``claim``: its text, for the coverage rule (a
    FACT whose deciding passage lacks part of the claim's key content is not sure)."""
    doubts = list(outcome.doubts)
    if outcome.vetoed is not None:
        doubts += [f"{f.reason} (support not counted)" for f in outcome.vetoed.findings
                   if f.veto]
    if category not in _LABEL:  # JUDGMENT_ERROR: strong, relevant evidence both ways
        return None, doubts
    row = _deciding(category, outcome, rows)
    column = _LABEL[category]
    confidence = float(row.calibrated[column]) if row and row.calibrated else None
    settled = row is not None and ((category == "FACT" and row.states_claim)
                                   or (category == "HALLUCINATION" and row.reviewed(CONTRADICT)))
    if not settled:
        doubts += _threshold_doubts(category, confidence, family)
    if category == "HALLUCINATION" and claim_negated and not settled:
        doubts.append("the claim is negated, and the verifier often reads a negation as a "
                      "contradiction")
    if category == "FACT" and row is not None:
        if row.relevance < MIN_RELEVANCE and not row.states_claim:
            doubts.append(relevance_reason(row) + ", too little to be sure it is about it")
        doubts += [f.reason for f in row.findings if not f.veto]
        if claim and not row.states_claim:
            doubts += coverage_doubts(claim, row.passage)
    return confidence, doubts


def coverage_doubts(claim: str, passage: Passage) -> list[str]:
    """Why a passage that does not state the claim cannot make its FACT confident: key
    content it lacks (:func:`uncovered`), or the passage's sentence most about the claim
    negates (or hedges) where the claim does not, or the other way round."""
    doubts = []
    missing = uncovered(claim, passage.text)
    if missing:
        doubts.append(f"passage {_name(passage)} does not mention {', '.join(missing[:6])}")
    ck = key_terms(claim)
    best = max(line_sentences(passage.text)[:200] or [passage.text],
               key=lambda sentence: coverage(ck, key_terms(sentence)))
    bk = key_terms(best)
    if bk.negated != ck.negated:
        side = "negates" if bk.negated else "does not negate"
        doubts.append(f"passage {_name(passage)} {side} what the claim says")
    elif bk.hedged != ck.hedged:
        doubts.append(f"passage {_name(passage)} hedges differently from the claim")
    return doubts


def uncovered(claim: str, passage_text: str) -> list[str]:
    """The claim's key items (numbers, names, content words; :func:`key_items`) that the
    passage does not hold, nor a synonym of (:data:`SYNONYMS`), in the claim's order. A
    supporting passage must cover them all before a FACT can be confident: a passage about
    shingles that never says "chickenpox" cannot make "the shingles vaccine protects
    against chickenpox" sure."""
    ck, pk = key_terms(claim), key_terms(passage_text)
    missing = {m for m in key_items(ck) - covered_items(ck, pk) if not synonyms(m) & pk.content}
    order = [fold(t) if not t[0].isdigit() else number_value(t) for t in tokens(claim)]
    return sorted(missing, key=lambda m: order.index(m) if m in order else len(order))


def _deciding(category: str, outcome: Outcome,
              rows: Sequence[PassageScore]) -> PassageScore | None:
    if category == "FACT":
        return outcome.support
    if category == "HALLUCINATION":
        return outcome.contradict
    return max(rows, key=lambda r: r.relevance) if rows else None


def _threshold_doubts(category: str, confidence: float | None, family: Family) -> list[str]:
    target = family_target(category)
    threshold = family.threshold(category)
    if threshold is None:
        return [f"the built-in judge's {category} does not reach {target:.0%} precision on "
                f"its calibration data ({family.name})"]
    if confidence is None or confidence < threshold:
        shown = "unknown" if confidence is None else f"{confidence:.2f}"
        return [f"calibrated {_NAME[category]}={shown}, below the {threshold:.2f} needed for "
                f"{target:.0%} precision ({family.name})"]
    return []


def family_target(category: str) -> float:
    return TARGETS[category]


def check_verdict(verdict: Verdict, claim: str, passages: Sequence[Passage]) -> Verdict:
    """A verdict of a judge that runs no exact checks itself (the LLM judge) passed through
    them: the passage its counting factual analysis names is checked; a veto stops that
    analysis counting (``vetoed``), other findings make the verdict not sure, and so does
    an analysis not counted for its evidence (``quote_problem``). No calibration exists for
    such judges yet, so ``confidence`` stays None and ``confident`` is only ever set to
    False (with ``not_sure``), never to True."""
    if not verdict.ok or verdict.factual is None:
        return verdict
    doubts: list[str] = []
    update: dict[str, object] = {}
    factual = verdict.factual
    passage = next((p for p in passages if p.id == factual.passage_id), None)
    if factual.counts and passage is not None:
        findings = find_conflicts(claim, passage.text, passage.id)
        vetoes = [f for f in findings if f.veto]
        if vetoes:
            update["factual"] = factual.model_copy(update={"vetoed": True})
        update["findings"] = [*verdict.findings, *findings]
        doubts += [f.reason + (" (support not counted)" if f.veto else "") for f in findings]
    for analysis in (verdict.factual, verdict.counterfactual):
        if analysis is not None and analysis.holds and analysis.verified is False:
            doubts.append(analysis.quote_problem or "the judge's quote was not found")
    if doubts:
        update |= {"confident": False, "not_sure": "; ".join(doubts)}
    return verdict.model_copy(update=update) if update else verdict
