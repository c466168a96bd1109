"""Text plumbing for the exact checks (:mod:`medverify.judge.checks`): tokens with their
offsets, sentences, negation scopes and the alignment of a claim with the passage sentences
that are about it.

A text is tokenized once (:func:`parse`) into words (``don't`` is one word), numbers
(``2.5``, ``1,000``) and single symbol characters (``%``, ``-``, ``/``), each with its
character offsets, so every check can quote the passage verbatim.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from functools import lru_cache

from medverify.terms import MODALS, NEGATIONS, STOPWORDS, fold
from medverify.text import sentence_spans


def word_list(text: str) -> list[str]:
    """The whitespace-separated words of ``text``, in order."""
    return text.split()


def words(text: str) -> frozenset[str]:
    """The whitespace-separated words of ``text``."""
    return frozenset(text.split())


_TOKEN = re.compile(r"[0-9]+(?:[.,\u00b7][0-9]+)*|[^\W\d_]+(?:'[^\W\d_]+)?|[^\w\s]")
_LINE = re.compile(r"[^\n]+")

MIN_ALIGNMENT = 0.5
"""Weighted share of the claim's key content (:func:`claim_items`) a passage sentence must
have to be about the claim."""
ALIGNMENT_MARGIN = 0.25
"""A sentence is aligned when its share is within this margin of the best sentence's."""
MAX_ALIGNED = 4
"""At most this many sentences (the best ones) are compared with the claim."""

CLAUSE_PUNCT = frozenset(",;:()[]{}.!?\u2014")
CLAUSE_WORDS = words(
    "but whereas while although though however yet which who whom whose because since unless "
    "except instead rather so thus therefore hence")
"""Words that end the scope of a negation or the reach of a direction word."""

BE = words("be is are was were been being become becomes became remain remains")
AUX = BE | MODALS | words(
    "do does did have has had will shall to also still yet always often usually")

_NEG_CUES = words(
    "not no never neither nor none nobody nothing without cannot unable fail fails failed "
    "failing")
_NOT_NEGATING_NEXT = words(
    "only just merely simply solely uncommon unusual unlikely infrequent insignificant "
    "negligible unimportant rare dissimilar unlike until least necessarily all always every "
    "more less fewer matter doubt exceeding beyond later sooner surprisingly unrelated "
    "unexpected unknown unreasonable inconsistent ineffective inconsiderable")
"""After "not"/"no" these words make the pair something other than a plain negation ("not
only", "not uncommon", "no more than", "not all")."""
_WEAK_BEFORE = words("may might perhaps possibly")
_ALMOST = words("almost nearly hardly virtually practically")
_SUBORDINATE = words("who which whom whose if when whenever unless whether where")
TRANSPARENT = words(
    "evidence proof data support sign signs indication shown proven demonstrated found "
    "established reported observed known seen significantly significant statistically "
    "clearly clear appear appears appeared seem seems seemed any effect effects affect "
    "affects affected difference differences change changes changed impact influence "
    "association associated link linked alter alters altered able")
"""Words skipped between a negation and the word it governs ("no evidence that vaccines
cause", "did not significantly affect mortality")."""
RELATIONS = words(
    "effect effects affect affects affected difference differences change changes changed "
    "impact influence association associated link linked alter alters altered")
"""Skipped words that are the claim's own predicate when the claim is the negated side: the
passage must state that relation too ("X does not affect CKD" is not contradicted by a
passage that merely names CKD)."""


@lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """:func:`medverify.terms.fold` with a final "e" dropped ("cause" and "causes"
    -> "caus"), so the inflections of one word compare equal more often."""
    folded = fold(word)
    return folded[:-1] if len(folded) > 4 and folded.endswith("e") else folded


def is_content(low: str) -> bool:
    """A word that carries content: alphabetic, 3+ letters, not a stopword, negation or
    modal."""
    return (len(low) > 2 and low[0].isalpha() and low not in STOPWORDS
            and low not in NEGATIONS and low not in MODALS and not low.endswith("n't"))


@dataclass(slots=True)
class Cue:
    """A negation in a text: the token it starts at, the first content word it governs
    (None when there is none) and the next one in its scope, the relation words skipped
    before it (:data:`RELATIONS`), and whether it is hedged ("may not"), elliptic ("A but
    not B": "not" after no auxiliary verb) or in a subordinate clause ("patients who did not
    ...")."""

    at: int
    governs: int | None
    second: int | None
    end: int
    relations: tuple[str, ...]
    hedged: bool
    elliptic: bool
    subordinate: bool


@dataclass(slots=True)
class Doc:
    """A tokenized text. ``low`` is each token case-folded; ``stems`` is :func:`stem` of
    words and the token itself otherwise; ``sents`` are token ranges ``[a, b)``;
    ``negated`` (per token) and ``cues`` are worked out on first use."""

    text: str
    toks: list[str]
    low: list[str]
    starts: list[int]
    ends: list[int]
    stems: list[str]
    sents: list[tuple[int, int]]
    _negation: tuple[list[bool], list[Cue]] | None = None

    @property
    def negated(self) -> list[bool]:
        """For each token, whether a negation's scope covers it."""
        return self._negated()[0]

    @property
    def cues(self) -> list[Cue]:
        """The negations of the text, in order."""
        return self._negated()[1]

    def _negated(self) -> tuple[list[bool], list[Cue]]:
        if self._negation is None:
            self._negation = _negation(self)
        return self._negation

    def span(self, a: int, b: int) -> str:
        """The verbatim text from token ``a`` through token ``b - 1``."""
        if a >= b:
            return ""
        return " ".join(self.text[self.starts[a]: self.ends[b - 1]].split())


def sentence_char_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of ``text``: its lines, each split by
    :func:`medverify.text.sentence_spans`."""
    return [span for line in _LINE.finditer(text)
            for span in sentence_spans(text, line.start(), line.end())]


def parse(text: str, spans: list[tuple[int, int]] | None = None) -> Doc:
    """Tokenize the sentences of ``text`` (all of them, or only the character ``spans``
    given, in order). Offsets always index ``text``."""
    norm = text.replace("\u2019", "'")
    if spans is None:
        spans = sentence_char_spans(norm)
        matches = list(_TOKEN.finditer(norm))
    else:
        matches = [m for a, b in spans for m in _TOKEN.finditer(norm, a, b)]
    toks = [m.group() for m in matches]
    starts = [m.start() for m in matches]
    ends = [m.end() for m in matches]
    low = [t.casefold() for t in toks]
    stems = [stem(t) if t[:1].isalpha() else t for t in low]
    sents = []
    for a, b in spans:
        first, last = bisect_left(starts, a), bisect_left(starts, b)
        if last > first:
            sents.append((first, last))
    return Doc(text, toks, low, starts, ends, stems, sents)


def _negation(doc: Doc) -> tuple[list[bool], list[Cue]]:
    negated = [False] * len(doc.toks)
    cues: list[Cue] = []
    for a, b in doc.sents:
        for i in range(a, b):
            if doc.low[i] not in _NEG_CUES and not doc.low[i].endswith("n't"):
                continue
            cue = _cue_at(doc, i, a, b)
            if cue is None:
                continue
            cues.append(cue)
            for j in range(i + 1, cue.end):
                negated[j] = True
    return negated, cues


def _cue_at(doc: Doc, i: int, a: int, b: int) -> Cue | None:
    low = doc.low[i]
    if low not in _NEG_CUES and not low.endswith("n't"):
        return None
    nxt = doc.low[i + 1] if i + 1 < b else ""
    if nxt in _NOT_NEGATING_NEXT:
        return None
    if low.startswith(("fail", "unable")) and nxt != "to":
        return None
    if low == "never" and i > a and doc.low[i - 1] in _ALMOST:
        return None  # "almost never" is "rarely": the FREQUENCY check's
    if low in ("nor", "neither") and i > a and doc.low[i - 1] in _NEG_CUES:
        return None
    end, governed, relations = _scope(doc, i + 1, b)
    prev = doc.low[i - 1] if i > a else ""
    clause = _clause_start(doc, i, a)
    subordinate = any(doc.low[j] in _SUBORDINATE for j in range(clause, i))
    elliptic = low == "not" and prev not in AUX
    return Cue(i, governed[0] if governed else None, governed[1] if len(governed) > 1 else None,
               end, relations, prev in _WEAK_BEFORE, elliptic, subordinate)


def _scope(doc: Doc, start: int, b: int) -> tuple[int, list[int], tuple[str, ...]]:
    """The end of a negation's scope (exclusive), its first two governed content words and
    the relation words skipped before the first."""
    governed: list[int] = []
    relations: list[str] = []
    count, j = 0, start
    while j < b and count < 8:
        low = doc.low[j]
        if low in CLAUSE_PUNCT or low in CLAUSE_WORDS:
            break
        if not governed and low in RELATIONS:
            relations.append(doc.stems[j])
        elif len(governed) < 2 and is_content(low) and low not in TRANSPARENT and low not in AUX:
            governed.append(j)
        count += low[:1].isalnum()
        j += 1
    return j, governed, tuple(relations)


def _clause_start(doc: Doc, i: int, a: int) -> int:
    j = i
    while j > a and doc.low[j - 1] not in CLAUSE_PUNCT:
        j -= 1
    return j


@dataclass(slots=True)
class Alignment:
    """The passage sentences about the claim (token ranges, best first) and their shares."""

    sentences: list[tuple[int, int]]
    shares: list[float]


def claim_items(doc: Doc) -> dict[str, int]:
    """The claim's key content as {stem: weight}: content words (numbers left out), names
    (a capital after the first token, or inside the word) weighing 2, others 1, as
    :func:`medverify.terms.coverage` weighs them."""
    items: dict[str, int] = {}
    for i, low in enumerate(doc.low):
        if not is_content(low):
            continue
        tok = doc.toks[i]
        name = (i > 0 and tok[0].isupper()) or tok[1:] != tok[1:].lower()
        items[doc.stems[i]] = max(items.get(doc.stems[i], 1), 2 if name else 1)
    return items


def align(claim: Doc, text: str, classes: dict[str, str] | None = None,
          ) -> tuple[Doc, Alignment]:
    """The sentences of passage ``text`` that are about ``claim``, tokenized, and their
    alignment: those whose weighted share of the claim's key content (:func:`claim_items`)
    reaches :data:`MIN_ALIGNMENT` and is within :data:`ALIGNMENT_MARGIN` of the best share
    (at most :data:`MAX_ALIGNED`, best first). A claim with fewer than two items aligns
    nothing. An item with a class in ``classes`` (a direction axis, a kind of population)
    counts as present when the sentence has any word of that class: those are the words an
    aligned sentence may say otherwise.

    Only sentences whose share can reach the minimum (every item's letters searched as a
    substring, a cheap upper bound) are tokenized, so the cost is one sentence split and a
    few substring searches per sentence."""
    classes = classes or {}
    items = claim_items(claim)
    total = sum(items.values())
    if len(items) < 2:
        return parse(text, []), Alignment([], [])
    norm = text.replace("\u2019", "'")
    free = sum(w for s, w in items.items() if s in classes)
    probes = [(s[:-1] if s.endswith("y") else s, w) for s, w in items.items() if s not in classes]
    spans = []
    for a, b in sentence_char_spans(norm):
        lowered = norm[a:b].casefold()
        if free + sum(w for probe, w in probes if probe in lowered) >= MIN_ALIGNMENT * total:
            spans.append((a, b))
    doc = parse(text, spans)
    scored = []
    for a, b in doc.sents:
        present = set(doc.stems[a:b])
        kinds = {classes[s] for s in present if s in classes}
        found = sum(w for s, w in items.items() if s in present or classes.get(s, "") in kinds)
        scored.append((found / total, a, b))
    best = max((s for s, _, _ in scored), default=0.0)
    if best < MIN_ALIGNMENT:
        return doc, Alignment([], [])
    floor = max(MIN_ALIGNMENT, best - ALIGNMENT_MARGIN)
    kept = sorted((s for s in scored if s[0] >= floor), key=lambda s: -s[0])[:MAX_ALIGNED]
    return doc, Alignment([(a, b) for _, a, b in kept], [s for s, _, _ in kept])
