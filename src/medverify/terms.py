"""The key content of a claim: the numbers, names and content words a passage must share to
be about the claim, and the cues (negation, modality) that change what a sentence says.

Pure text functions (a base-layer module: it imports nothing from medverify), shared below
the judge by everyone who asks what a claim is about: the judge's relevance weighting of
passages (:func:`relevance`, :data:`MIN_RELEVANCE`, :data:`STRONG_RELEVANCE`, used by
:mod:`medverify.judge.decide`), the exact checks (:mod:`medverify.judge.checks`), the quote
rule (:mod:`medverify.judge.evidence`), retrieval's count of strong passages
(:mod:`medverify.checker`) and settling a claim by a reviewed one
(:mod:`medverify.review.settled`). Words are compared after a light,
deterministic suffix fold (:func:`fold`: "lowers" / "lowered" / "lowering" -> "lower"), so
no stemmer package is needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

_NEGATION_TEXT = """
not no never neither nor none nobody nothing without cannot can't won't don't doesn't didn't
isn't aren't wasn't weren't shouldn't wouldn't couldn't mustn't hasn't haven't hadn't n't
lack lacks lacking absent absence fail fails failed unable
"""
NEGATIONS = frozenset(_NEGATION_TEXT.split())
"""Words that negate what follows them in their clause."""

_MODAL_TEXT = """
may might could can should must would shall ought possibly probably perhaps likely unlikely
"""
MODALS = frozenset(_MODAL_TEXT.split())
"""Words that turn a statement into a possibility, an advice or an obligation."""

_STOPWORD_TEXT = """
a an the of and or in on at to for by with from is are was were be been being it its this that
these those as but can may might will would should could do does did has have had than then
there their they them he she his her we you i our your which who whom whose what when where
why how also such so very more most less least into onto over under about after before
during between among per via each every any all some other than both either one s t
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split()) - NEGATIONS
"""Function words: never key content."""

_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[^\W\d_]+(?:[-'][^\W\d_]+)*", re.UNICODE)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SUFFIXES = ("ations", "ation", "ings", "ing", "edly", "ed", "ies", "es", "s", "ly")


@lru_cache(maxsize=1 << 16)
def fold(word: str) -> str:
    """A word lower-cased with one common inflection suffix removed ("reduces" ->
    "reduc", "reduced" -> "reduc"); words of 4 letters or fewer stay as they are."""
    word = word.casefold()
    if len(word) <= 4 or not word.isalpha():
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            stem = word[: -len(suffix)]
            if suffix == "ies":
                stem += "y"
            return stem.rstrip("e") if suffix in ("es", "ed", "ing") else stem
    return word.rstrip("e") if word.endswith("e") and len(word) > 5 else word


def tokens(text: str) -> list[str]:
    """The words and numbers of ``text`` in order, as written (no case folding)."""
    return _TOKEN.findall(text)


def number_value(token: str) -> str:
    """A number token in one spelling: thousands commas dropped ("1,000" -> "1000"), a
    decimal comma read as a point ("2,5" -> "2.5"), trailing zeros of a decimal dropped."""
    if "," in token:
        head, _, tail = token.rpartition(",")
        token = token.replace(",", "") if len(tail) == 3 else f"{head.replace(',', '')}.{tail}"
    if "." in token:
        token = token.rstrip("0").rstrip(".") or "0"
    return token


@dataclass(frozen=True)
class KeyTerms:
    """What a text is about: its numbers (one spelling, see :func:`number_value`), names
    (words written with a capital or a digit inside a word, lower-cased) and content
    words (folded, see :func:`fold`), and whether it is negated or hedged."""

    numbers: frozenset[str]
    names: frozenset[str]
    words: frozenset[str]
    negated: bool
    hedged: bool

    @property
    def content(self) -> frozenset[str]:
        """Every key item (numbers, names folded, content words)."""
        return self.numbers | self.words | frozenset(fold(n) for n in self.names)

    def __bool__(self) -> bool:
        return bool(self.numbers or self.names or self.words)


@lru_cache(maxsize=8192)
def key_terms(text: str) -> KeyTerms:
    """The key content of ``text`` (see :class:`KeyTerms`); cached, since a passage is
    compared with many claims and a claim with many passages."""
    numbers, names, words = set(), set(), set()
    negated = hedged = False
    for i, t in enumerate(tokens(text)):
        if t[0].isdigit():
            numbers.add(number_value(t))
            continue
        low = t.casefold()
        if low in MODALS:
            hedged = True
            continue
        if low in STOPWORDS:
            continue
        if low in NEGATIONS or low.endswith("n't"):
            negated = True
            continue
        if (i > 0 and t[0].isupper()) or (len(t) > 1 and not t[1:].islower()):
            names.add(low)
        if len(low) > 2:
            words.add(fold(low))
    return KeyTerms(numbers=frozenset(numbers), names=frozenset(names),
                    words=frozenset(words), negated=negated, hedged=hedged)


def coverage(claim: KeyTerms, other: KeyTerms) -> float:
    """The weighted share of the claim's key content found in ``other``: numbers and names
    count twice as much as other content words. 0.0 for a claim with no key content."""
    folded_names = frozenset(fold(n) for n in claim.names)
    plain = claim.words - folded_names
    other_content = other.content
    total = 2 * len(claim.numbers) + 2 * len(folded_names) + len(plain)
    if not total:
        return 0.0
    found = (2 * len(claim.numbers & other.numbers) + 2 * len(folded_names & other_content)
             + len(plain & other_content))
    return found / total


MIN_RELEVANCE = 0.25  # below: the passage is about something else (cannot contradict)
STRONG_RELEVANCE = 0.5  # each side of a JUDGMENT_ERROR must hold this much of the claim


def relevance(claim: KeyTerms, passage_text: str) -> float:
    """The weighted share of the claim's key content the passage holds (:func:`coverage`
    of the passage's key terms): how much a passage is about the claim, for the judge's
    rule, retrieval's strong-passage count and settling."""
    return coverage(claim, key_terms(passage_text))


def cue(word: str) -> str | None:
    """``"negation"`` when ``word`` negates (one of :data:`NEGATIONS`, or any "...n't"),
    ``"modal"`` when it is one of :data:`MODALS`, else None (case-insensitive)."""
    word = word.casefold().replace("\u2019", "'")
    if word in NEGATIONS or word.endswith("n't"):
        return "negation"
    return "modal" if word in MODALS else None


def key_items(claim: KeyTerms) -> frozenset[str]:
    """The claim's key items as :func:`coverage` counts them: numbers, folded names and
    the other content words (each once)."""
    return claim.numbers | frozenset(fold(n) for n in claim.names) | claim.words


def covered_items(claim: KeyTerms, other: KeyTerms) -> frozenset[str]:
    """The claim's key items (:func:`key_items`) that ``other`` also has."""
    folded_names = frozenset(fold(n) for n in claim.names)
    return ((claim.numbers & other.numbers) | (folded_names & other.content)
            | ((claim.words - folded_names) & other.content))


def subject(text: str) -> str | None:
    """The claim's leading name, folded: its first word when that is written with a capital
    and is neither a stopword, a negation, a modal nor a number ("Metformin lowers ..." ->
    "metformin"; "The dose ..." -> None). :func:`key_terms` does not count a sentence's
    first word as a name; a quote about the claim should still name it."""
    toks = tokens(text)
    if not toks or not toks[0][:1].isupper():
        return None
    first = toks[0].casefold()
    if first.endswith("'s"):
        first = first[:-2]
    if first in STOPWORDS or cue(first) or len(first) < 2:
        return None
    return fold(first)


_SYNONYM_TEXT = """
chickenpox varicella
shingles zoster herpes-zoster
heart cardiac
kidney renal
liver hepatic
lung pulmonary
blood haematological hematological
cancer tumor tumour malignancy carcinoma
children child kids paediatric pediatric
adults adult
elderly older
medicine medication drug
physician doctor
vaccine vaccination immunization immunisation
"""
SYNONYMS: dict[str, frozenset[str]] = {}
"""Words a passage may use for a claim's word (folded, both ways): a short, curated list
for the coverage rule of :mod:`medverify.judge.decide`, not a thesaurus."""
for _line in _SYNONYM_TEXT.strip().splitlines():
    _group = frozenset(fold(w) for w in _line.split())
    for _word in _group:
        SYNONYMS[_word] = SYNONYMS.get(_word, frozenset()) | _group


def synonyms(item: str) -> frozenset[str]:
    """The folded key item and its synonyms from :data:`SYNONYMS`."""
    return SYNONYMS.get(item, frozenset()) | {item}


_INERT_TEXT = """
a an the of is are was were be been being it its this that these those which who whom also
and very just
"""
INERT = frozenset(_INERT_TEXT.split())
"""Words two statements may differ by and still say the same thing. Every other word counts,
stopwords such as "most"/"least", "before"/"after", "more"/"less" or "with"/"without"
included: a near-verbatim statement of a claim (:func:`medverify.judge.decide.states_claim`)
or a restated reviewed claim (:mod:`medverify.review.settled`) may differ only by these.
Any other difference in makes another claim."""


def meaning_differences(a: str, b: str) -> frozenset[str]:
    """The words (folded, numbers as written) that one text has and the other lacks, less
    the :data:`INERT` ones."""
    wa = {fold(t) for t in tokens(a)}
    wb = {fold(t) for t in tokens(b)}
    return frozenset(w for w in wa ^ wb if w not in INERT)
