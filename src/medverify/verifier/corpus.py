"""A large synthetic medical NLI corpus for the built-in verifier, built from allowed text.

Documents (MedQuAD answers, PubMedQA abstracts, the retrieval corpora, the evidence texts of
the allowed train pair files) are cut into sentences; each sentence (or pair of adjacent
sentences) yields candidate (claim, evidence, label) pairs of three families:

- ``supported``: the sentence restated (verbatim, a leading/trailing clause dropped, two
  adjacent sentences fused, an abbreviation or synonym swapped using a definition from the
  same document, which the evidence then contains); hedges are kept as they are.
- ``contradicted``: exactly one typed edit (:data:`CONTRADICTED_TYPES`).
- ``nei``: a BM25 hard negative from another document group, a window of the same document
  about something else, or the document around the sentence without the sentence itself; each
  evidence must lack the claim's key content (:func:`lacks_key_content`).

Evidence is a window of consecutive sentences (at most ``max_words`` words). Candidates are
drawn per label and per type with water-filled quotas (balanced where a type has enough
candidates), each pair is checked against a near-duplicate hash of the corpus and against the
dev/evaluation sets (:class:`LeakageIndex`) before it is accepted. Everything is seeded and
deterministic (no iteration over sets of strings, no process-randomised hashes in decisions).
Dev/evaluation files are read only by :func:`load_eval_sets`, for the leakage check.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import os
import random
import re
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from medverify.errors import InputError

LABELS = ("SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO")
SUPPORTED_TYPES = ("extract", "clause_drop", "fusion", "abbreviation", "synonym")
CONTRADICTED_TYPES = (
    "negation",
    "number",
    "unit",
    "dose_frequency",
    "population",
    "drug_swap",
    "condition_swap",
    "direction",
    "temporal_causal",
    "quantifier",
)
NEI_TYPES = ("bm25_hard", "same_doc_other", "sentence_removed")
FAMILIES = {
    "SUPPORTED": ("supported", SUPPORTED_TYPES),
    "CONTRADICTED": ("contradicted", CONTRADICTED_TYPES),
    "NOT_ENOUGH_INFO": ("nei", NEI_TYPES),
}
TRAIN_PAIR_FILES = ("checkcovid_train", "citint_train", "scifact_train")
_FORBIDDEN = ("_dev", "_val", "healthver", "covidfact", "covid-fact", "expertqa")
EVAL_PAIR_FILES = (
    "checkcovid_dev",
    "citint_dev",
    "healthver_dev",
    "covidfact_train",
    "covidfact_dev",
    "expertqa_val",
)


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class Document:
    """A source document: sentences in order, the paragraph of each, and its split group."""

    doc_id: str
    source: str
    group: str
    sentences: tuple[str, ...]
    paras: tuple[int, ...]
    focus: str = ""
    synonyms: tuple[str, ...] = ()


@dataclass(frozen=True)
class CorpusPair:
    """One generated (claim, evidence, label) pair with its provenance."""

    id: str
    claim: str
    evidence: str
    label: str
    generator: str
    edit_type: str
    source: str
    doc_id: str
    group: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class Lexicons:
    """Same-type entity names (lower case) for drug and condition swaps."""

    drugs: list[str] = field(default_factory=list)
    conditions: list[str] = field(default_factory=list)


@dataclass
class Candidate:
    """A pair before its evidence is drawn: the claim (or an edit still to apply) and where."""

    edit_type: str
    doc: int
    lo: int
    hi: int
    claim: str
    exclude: int = -1
    span: tuple[int, int] | None = None  # entity span for drug/condition swaps


# ---------------------------------------------------------------- text helpers


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


_WS = re.compile(r"\s+")
_SENT_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[A-Z0-9(\"\[])")
_ABBREV_END = re.compile(
    r"\b(?:e\.g|i\.e|et al|Dr|vs|Fig|Figs|No|approx|ca|cf|Mr|Mrs|Ms|St|Inc|Ltd|resp)\.$"
)
_TOKEN = re.compile(r"[a-z0-9]+")
_STRAY_DOT = re.compile(r"(?<=[.:;])\s+\.(?=\s|$)|^\s*\.\s+")
_STOP = _wordset(
    """a an the of in on and or to for with by is are was were be been being that this these
    those as at from it its which not no can may might could than into also has have had
    such their there they them he she his her we our you your who whom whose will would
    should do does did about other some any all more most very if when while but so because
    one two how what where why after before between during over under up out only both
    each many much often usually people person"""
)
_BOILER = re.compile(
    r"https?:|www\.|click here|medlineplus|phenotype ontology|orphanet|this table|"
    r"table below|these resources|you can use|see a list|for more information|"
    r"contact us|copyright|\bGARD\b|the information is available|genetic testing registry|"
    r"gene review|clinicaltrials\.gov|encyclopedia:",
    re.I,
)


def normalize(text: str) -> str:
    """Lower-cased alphanumeric words joined by single spaces (for hashing and n-grams)."""
    return " ".join(_TOKEN.findall(text.lower()))


def content_words(text: str) -> list[str]:
    """Lower-cased content words of ``text`` in order (stop words and 1-letter words out)."""
    return [w for w in _TOKEN.findall(text.lower()) if w not in _STOP and len(w) > 1]


def split_sentences(text: str) -> list[str]:
    """Sentences of one paragraph: split at newlines (list items; a missing full stop is
    added) and after ``. ! ?`` before a capital, digit or bracket."""
    out: list[str] = []
    for line in _STRAY_DOT.sub("\n", text).split("\n"):
        line = _WS.sub(" ", line).strip(" -")
        if not line:
            continue
        if line[-1] not in ".!?:;":
            line += ";"  # a list item or heading: kept as evidence, never a claim
        start = 0
        for match in _SENT_END.finditer(line):
            piece = line[start : match.start() + 1]
            if _ABBREV_END.search(piece.rstrip("\"')]")):
                continue
            out.append(piece.strip())
            start = match.end()
        out.append(line[start:].strip())
    return [s for s in out if s and s != "."]


def _n_words(text: str) -> int:
    return len(text.split())


def _clean_sentence(sentence: str) -> bool:
    """A sentence worth keeping in a document (not a question, list fragment or boilerplate)."""
    n = _n_words(sentence)
    if n < 4 or n > 80 or sentence.endswith("?") or _BOILER.search(sentence):
        return False
    letters = sum(c.isalpha() for c in sentence)
    return letters >= 0.6 * len(sentence)


def claimable(sentence: str, lo: int = 6, hi: int = 45) -> bool:
    """A sentence fit to be a claim: a plain statement of ``lo``-``hi`` words."""
    n = _n_words(sentence)
    words = sentence.split()
    return (
        lo <= n <= hi
        and sentence[0].isupper()
        and sentence.count(";") <= 1
        and sum(w[:1].isupper() for w in words[1:]) <= 0.4 * n
        and sentence[-1] in ".!"
        and len(content_words(sentence)) >= 3
        and "(" not in sentence[:2]
    )


def _keep_case(original: str, replacement: str) -> str:
    if original.isupper() and len(original) > 1:
        return replacement.upper()
    if original[:1].isupper():
        return replacement[:1].upper() + replacement[1:]
    return replacement


def _replace_span(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + _keep_case(text[start:end], new) + text[end:]


def _hash(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


# ---------------------------------------------------------------- contradiction edits

_NEG_REMOVE = re.compile(
    r"\b(is|are|was|were|does|do|did|can|could|will|would|should|has|have|had|must) not\b"
)
_NEG_CONTRACT = re.compile(r"\b(cannot|isn't|aren't|doesn't|don't|didn't|won't|wasn't|weren't)\b")
_NEG_ADD = re.compile(r"\b(is|are|was|were|can|will|should|does|do|has|have|must)\b(?! not\b)")
_NEG_VERBS = {
    "causes": "cause",
    "affects": "affect",
    "occurs": "occur",
    "leads": "lead",
    "requires": "require",
    "increases": "increase",
    "reduces": "reduce",
    "decreases": "decrease",
    "improves": "improve",
    "prevents": "prevent",
    "protects": "protect",
    "contains": "contain",
    "involves": "involve",
    "develops": "develop",
    "helps": "help",
    "works": "work",
    "depends": "depend",
    "needs": "need",
    "reduced": "reduce",
    "increased": "increase",
    "improved": "improve",
    "decreased": "decrease",
    "prevented": "prevent",
    "showed": "show",
    "caused": "cause",
    "inhibited": "inhibit",
    "induced": "induce",
    "enhanced": "enhance",
    "affected": "affect",
    "predicted": "predict",
}
_NEG_VERB_RE = re.compile(r"\b(" + "|".join(_NEG_VERBS) + r")\b")
_PARTICIPLE_BEFORE = _wordset(
    "is are was were be been being has have had not the a an of that which who"
)
_NO_NEGATE_AFTER = _wordset("that who which there may might could would should can will must to")
_CONTRACTIONS = {
    "cannot": "can",
    "isn't": "is",
    "aren't": "are",
    "doesn't": "does",
    "don't": "do",
    "didn't": "did",
    "won't": "will",
    "wasn't": "was",
    "weren't": "were",
}


def edit_negation(sentence: str, rng: random.Random) -> str | None:
    """Add or remove one negation of the main verb."""
    match = _NEG_REMOVE.search(sentence)
    if match and not sentence[match.end() :].startswith(" only"):
        return sentence[: match.start()] + match.group(1) + sentence[match.end() :]
    match = _NEG_CONTRACT.search(sentence)
    if match:
        word = match.group(1).lower()
        return _replace_span(sentence, match.start(), match.end(), _CONTRACTIONS[word])
    if re.search(r"\b(no|never|none|neither|nor|without)\b", sentence, re.I):
        return None  # already negative in other ways: an added "not" would be ambiguous
    for match in _NEG_ADD.finditer(sentence):
        before = sentence[: match.start()].split()
        if before and before[-1].lower() in _NO_NEGATE_AFTER:
            continue
        word = match.group(1)
        new = "cannot" if word.lower() == "can" else f"{word} not"
        return sentence[: match.start()] + _keep_case(word, new) + sentence[match.end() :]
    match = _NEG_VERB_RE.search(sentence)
    if match:
        before = sentence[: match.start()].split()
        after = sentence[match.end() :].split()
        if not before or before[-1].lower().strip(",") in _PARTICIPLE_BEFORE:
            return None
        if after and after[0].lower() in {"by", "with", "in", "to"} and match.group(1)[-2:] == "ed":
            return None
        word = match.group(1)
        aux = "did" if word.endswith("ed") or word == "showed" else "does"
        return sentence[: match.start()] + f"{aux} not {_NEG_VERBS[word]}" + sentence[match.end() :]
    return None


_DOSE_UNITS = (
    r"times|mg|mcg|µg|ug|g|kg|ml|mL|L|IU|units?|tablets?|capsules?|doses?|drops?|puffs?|"
    r"mg/kg|mg/day|mg/d|g/day|mmol|mEq"
)
_TIME_UNITS = r"seconds?|minutes?|hours?|days?|weeks?|months?|years?"
_NUMBER = re.compile(r"(?<![\w.\-/–])(\d+(?:[.,]\d+)?)(?![\w\-–]|[.,]\d)(\s?%|\s(?:percent))?")
_NUM_BLOCK_BEFORE = re.compile(
    r"\b(?:type|grade|stage|phase|class|chromosome|trisomy|factor|covid|fig|figure|table|"
    r"version|level|wave|gen|step|day|week|n|no|p|ref|refs|chapter|section)\W{0,3}$",
    re.I,
)
_UNIT_AFTER = re.compile(rf"^\s?({_DOSE_UNITS}|{_TIME_UNITS})\b")
_PER_AFTER = re.compile(r"\s(?:a|per|each|every)\s(?:day|week|month|year)\b")
_DURATION_BEFORE = re.compile(r"\b(for|every|per|within|after|over|each|up to|about|last)\s$", re.I)


def _number_spans(sentence: str) -> list[tuple[int, int, str, bool]]:
    """(start, end, number text, dose-like) of the editable numbers of ``sentence``."""
    out = []
    for match in _NUMBER.finditer(sentence):
        num = match.group(1)
        before = sentence[: match.start()]
        after = sentence[match.end(1) :]
        value = float(num.replace(",", "")) if num.count(",") <= 1 else 0.0
        if re.fullmatch(r"1[89]\d\d|20[0-4]\d", num):
            continue  # a year
        if (_NUM_BLOCK_BEFORE.search(before) or before.endswith(("(", "[", "-"))) and not (
            before.endswith("(") and match.group(2)
        ):
            continue
        if re.match(r"^%?\s*(?:CI|confidence|credible)\b", after):
            continue
        if re.match(r"^\s*[\]\)]", after) and before.rstrip().endswith(("(", "[", ",")):
            continue  # a citation like (12)
        if value == 0 or before.lower().endswith(("call ", "dial ")):
            continue
        unit = _UNIT_AFTER.match(after)
        dose = bool(unit) and (
            not re.fullmatch(_TIME_UNITS, unit.group(1))
            or bool(_DURATION_BEFORE.search(before))
            or bool(_PER_AFTER.match(after[unit.end() :]))
        )
        out.append((match.start(1), match.end(1), num, dose))
    return out


def _changed_number(num: str, rng: random.Random, percent: bool) -> str:
    value = float(num.replace(",", ""))
    decimals = len(num.split(".")[1]) if "." in num else 0
    for _ in range(10):
        factor = rng.choice((2.0, 3.0, 4.0, 0.5, 0.25, 1.5))
        new = value * factor if value >= 2 or factor > 1 else value + rng.choice((2, 5, 10))
        if percent and new > 100:
            new = value / 2 if value > 2 else value + 10
        text = f"{new:.{decimals}f}" if decimals else str(round(new))
        if text != num.replace(",", "") and float(text) > 0:
            return text
    return str(round(value) + 7)


def edit_number(sentence: str, rng: random.Random, dose: bool = False) -> str | None:
    """Change one number (``dose``: one next to a dose/duration unit) by a clear factor."""
    spans = [s for s in _number_spans(sentence) if s[3] == dose]
    if not spans:
        return None
    start, end, num, _ = rng.choice(spans)
    percent = bool(re.match(r"\s?(?:%|percent)", sentence[end:]))
    return sentence[:start] + _changed_number(num, rng, percent) + sentence[end:]


_FREQ = {
    "once": ["twice", "three times"],
    "twice": ["once", "four times"],
    "daily": ["weekly", "monthly"],
    "weekly": ["daily", "monthly"],
    "monthly": ["weekly", "yearly"],
    "annually": ["every month", "every five years"],
    "yearly": ["monthly", "every five years"],
    "hourly": ["daily"],
    "every day": ["every week", "every month"],
    "every other day": ["twice a day", "every week"],
    "once a day": ["twice a day", "once a week"],
    "twice a day": ["once a week", "four times a day"],
    "once a week": ["once a month", "every day"],
    "once a month": ["once a week", "once a year"],
    "once a year": ["once a month", "every ten years"],
    "every year": ["every month", "every ten years"],
    "every week": ["every day", "every month"],
    "every month": ["every week", "every year"],
}
_FREQ_RE = re.compile(r"\b(" + "|".join(sorted(_FREQ, key=len, reverse=True)) + r")\b", re.I)


def edit_dose_frequency(sentence: str, rng: random.Random) -> str | None:
    """Change a dose, a duration or a frequency (number by a unit, or a frequency word)."""
    options: list[Callable[[], str | None]] = []
    if any(s[3] for s in _number_spans(sentence)):
        options.append(lambda: edit_number(sentence, rng, dose=True))
    freq = [
        m
        for m in _FREQ_RE.finditer(sentence)
        if not (
            m.group(1).lower() == "once"
            and re.match(r"\s+(?:the|a|an|you|it|they|he|she|this|symptoms)\b", sentence[m.end() :])
        )
    ]
    if freq:
        match = rng.choice(freq)
        new = rng.choice(_FREQ[match.group(1).lower()])
        options.append(lambda: _replace_span(sentence, match.start(), match.end(), new))
    if not options:
        return None
    return rng.choice(options)()


_UNIT_SWAPS = {
    "mg": ["g", "mcg"],
    "g": ["mg", "kg"],
    "mcg": ["mg"],
    "µg": ["mg"],
    "kg": ["g"],
    "ml": ["L"],
    "mL": ["L"],
    "cm": ["mm", "m"],
    "mm": ["cm"],
    "seconds": ["minutes"],
    "second": ["minute"],
    "minutes": ["hours", "seconds"],
    "minute": ["hour", "second"],
    "hours": ["days", "minutes"],
    "hour": ["day", "minute"],
    "days": ["weeks", "hours"],
    "day": ["week", "hour"],
    "weeks": ["months", "days"],
    "week": ["month", "day"],
    "months": ["years", "weeks"],
    "month": ["year", "week"],
    "years": ["months", "decades"],
    "year": ["month", "decade"],
}
_UNIT_RE = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d+)?(?:\s?(?:-|–|to)\s?\d+(?:[.,]\d+)?)?\s?("
    + "|".join(sorted(_UNIT_SWAPS, key=len, reverse=True))
    + r")(?![\w])"
)


def edit_unit(sentence: str, rng: random.Random) -> str | None:
    """Swap the unit of a measured quantity for another of the same dimension."""
    matches = [m for m in _UNIT_RE.finditer(sentence) if not sentence[m.end() :].startswith("-")]
    if not matches:
        return None
    match = rng.choice(matches)
    new = rng.choice(_UNIT_SWAPS[match.group(1)])
    return sentence[: match.start(1)] + new + sentence[match.end(1) :]


def _word_swapper(mapping: dict[str, list[str]]) -> re.Pattern[str]:
    keys = sorted(mapping, key=len, reverse=True)
    return re.compile(r"(?<![\w-])(" + "|".join(re.escape(k) for k in keys) + r")(?![\w-])", re.I)


def _swap_words(
    sentence: str,
    mapping: dict[str, list[str]],
    pattern: re.Pattern[str],
    rng: random.Random,
    skip: Callable[[re.Match[str]], bool] | None = None,
) -> str | None:
    matches = [m for m in pattern.finditer(sentence) if not (skip and skip(m))]
    if not matches:
        return None
    match = rng.choice(matches)
    new = rng.choice(mapping[match.group(1).lower()])
    return _replace_span(sentence, match.start(), match.end(), new)


_POPULATION = {
    "children": ["adults"],
    "child": ["adult"],
    "adults": ["children"],
    "adult": ["child"],
    "men": ["women"],
    "women": ["men"],
    "males": ["females"],
    "females": ["males"],
    "male": ["female"],
    "female": ["male"],
    "boys": ["girls"],
    "girls": ["boys"],
    "infants": ["adults"],
    "newborns": ["adults"],
    "adolescents": ["older adults"],
    "elderly": ["young"],
    "older adults": ["children", "young adults"],
    "older people": ["children", "young people"],
    "young adults": ["older adults"],
    "pregnant women": ["postmenopausal women", "men"],
    "during pregnancy": ["after menopause"],
    "premenopausal": ["postmenopausal"],
    "postmenopausal": ["premenopausal"],
    "pediatric": ["adult"],
    "paediatric": ["adult"],
}
_POPULATION_RE = _word_swapper(_POPULATION)


def edit_population(sentence: str, rng: random.Random) -> str | None:
    """Swap one population (adults/children, men/women, pregnant/postmenopausal, ...);
    never in a sentence already naming the other population ("both men and women")."""
    lower = sentence.lower()

    def skip(m: re.Match[str]) -> bool:
        return any(
            re.search(rf"(?<![\w-]){re.escape(alt)}(?![\w-])", lower)
            for alt in _POPULATION[m.group(1).lower()]
        )

    return _swap_words(sentence, _POPULATION, _POPULATION_RE, rng, skip)


_DIRECTION_PAIRS = (
    ("increase", "decrease"),
    ("increases", "decreases"),
    ("increased", "decreased"),
    ("increasing", "decreasing"),
    ("higher", "lower"),
    ("more", "less"),
    ("raises", "lowers"),
    ("raised", "lowered"),
    ("greater", "smaller"),
    ("larger", "smaller"),
    ("longer", "shorter"),
    ("faster", "slower"),
    ("better", "worse"),
    ("improves", "worsens"),
    ("improved", "worsened"),
    ("upregulated", "downregulated"),
    ("up-regulated", "down-regulated"),
    ("upregulation", "downregulation"),
    ("promotes", "inhibits"),
    ("promoted", "inhibited"),
    ("elevated", "reduced"),
    ("positively", "negatively"),
    ("gain", "loss"),
    ("rise", "fall"),
)
_DIRECTION: dict[str, list[str]] = {}
for _a, _b in _DIRECTION_PAIRS:
    _DIRECTION.setdefault(_a, [_b])
    _DIRECTION.setdefault(_b, [_a])
_DIRECTION.update(
    {
        "reduces": ["increases"],
        "reduced": ["increased"],
        "reducing": ["increasing"],
        "lowered": ["raised"],
        "a reduction": ["an increase"],
        "a decrease": ["an increase"],
        "an increase": ["a decrease"],
        "smaller": ["larger"],
    }
)
_DIRECTION_RE = _word_swapper(_DIRECTION)


def edit_direction(sentence: str, rng: random.Random) -> str | None:
    """Flip one direction word (increase/decrease, more/less, higher/lower, raises/lowers)."""

    def skip(m: re.Match[str]) -> bool:
        word = m.group(1).lower()
        rest = sentence[m.end() :]
        if word == "more" and re.match(r"\s+(?:than one|often|likely|about|information)", rest):
            return word == "more" and "likely" not in rest[:8]
        return (
            word in {"gain", "loss"}
            and not re.match(r"\s+of\b", rest)
            and "weight" not in (sentence[max(0, m.start() - 8) : m.start()].lower())
        )

    return _swap_words(sentence, _DIRECTION, _DIRECTION_RE, rng, skip)


_TEMPORAL = {
    "before": ["after"],
    "after": ["before"],
    "prior to": ["after"],
    "preceded by": ["followed by"],
    "followed by": ["preceded by"],
    "earlier than": ["later than"],
    "later than": ["earlier than"],
}
_TEMPORAL_RE = _word_swapper(_TEMPORAL)
_CAUSAL_FLIP = {
    "causes": "is caused by",
    "cause": "are caused by",
    "can cause": "can be caused by",
    "may cause": "may be caused by",
    "is caused by": "causes",
    "are caused by": "cause",
    "can be caused by": "can cause",
    "may be caused by": "may cause",
    "leads to": "results from",
    "lead to": "result from",
    "results in": "results from",
    "result in": "result from",
    "results from": "results in",
    "result from": "result in",
    "triggers": "is triggered by",
    "is triggered by": "triggers",
    "is due to": "causes",
    "are due to": "cause",
}
_CAUSAL_RE = re.compile(
    r"^([^,;:]{3,90}?)\s(" + "|".join(sorted(_CAUSAL_FLIP, key=len, reverse=True)) + r")\s(\S)"
)


_NOUN_BEFORE = _wordset(
    """the a an main primary major common known exact underlying leading only no possible
    likely most one another frequent usual root any other this that these its their"""
)


def _causal_verb(match: re.Match[str]) -> bool:
    """The matched "cause(s)/leads to/..." is a verb of the main clause, not a noun."""
    subject = match.group(1)
    if re.search(r"\b(which|that|who|what|how|when|if)\b", subject, re.I):
        return False
    words = subject.split()
    last = words[-1].lower() if words else ""
    if last in _NOUN_BEFORE or last.endswith("'s"):
        return False
    return not match.string[match.end(2) :].startswith(" of ")


def edit_temporal_causal(sentence: str, rng: random.Random) -> str | None:
    """Reverse a causal link (A causes B -> A is caused by B) or swap before/after."""
    options: list[Callable[[], str | None]] = []
    match = _CAUSAL_RE.search(sentence)
    if match and _causal_verb(match):
        verb = match.group(2)
        options.append(
            lambda: sentence[: match.start(2)] + _CAUSAL_FLIP[verb] + sentence[match.end(2) :]
        )
    if _TEMPORAL_RE.search(sentence):
        options.append(lambda: _swap_words(sentence, _TEMPORAL, _TEMPORAL_RE, rng))
    if not options:
        return None
    return rng.choice(options)()


_QUANT = {
    "all": ["only some"],
    "always": ["never", "rarely"],
    "never": ["always", "often"],
    "usually": ["rarely"],
    "often": ["rarely"],
    "frequently": ["rarely"],
    "commonly": ["rarely"],
    "rarely": ["often", "usually"],
    "sometimes": ["always", "never"],
    "most": ["few"],
    "many": ["few"],
    "few": ["many"],
    "some": ["all"],
    "none": ["all"],
    "majority": ["minority"],
    "minority": ["majority"],
}
_QUANT_RE = _word_swapper(_QUANT)
_QUANT_NOUNS = re.compile(
    r"\s+(?:of|people|patients|cases|individuals|children|adults|women|men|forms|types|"
    r"studies|affected|persons|infants|families|tumors|tumours|subjects|participants)\b",
    re.I,
)


def edit_quantifier(sentence: str, rng: random.Random) -> str | None:
    """Swap one quantifier (all -> only some, always -> never, most -> few, ...)."""

    def skip(m: re.Match[str]) -> bool:
        word = m.group(1).lower()
        rest = sentence[m.end() :]
        before = sentence[max(0, m.start() - 4) : m.start()].lower()
        if word in {"most", "some", "many", "few", "all", "none"}:
            if word == "all" and re.match(r"\s+(?:the|of|patients|people|cases|forms|types)", rest):
                return before.endswith("at ") or before.endswith("of ")
            return not _QUANT_NOUNS.match(rest) or before.endswith("a ")
        return word in {"majority", "minority"} and not before.endswith("the ")

    return _swap_words(sentence, _QUANT, _QUANT_RE, rng, skip)


EDITS: dict[str, Callable[[str, random.Random], str | None]] = {
    "negation": edit_negation,
    "number": lambda s, r: edit_number(s, r, dose=False),
    "unit": edit_unit,
    "dose_frequency": edit_dose_frequency,
    "population": edit_population,
    "direction": edit_direction,
    "temporal_causal": edit_temporal_causal,
    "quantifier": edit_quantifier,
}


# ---------------------------------------------------------------- entity lexicons


class _Matcher:
    """Longest-match lookup of lower-cased multi-word names in a sentence's words."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names: dict[tuple[str, ...], str] = {}
        self.first: dict[str, int] = {}
        for name in names:
            key = tuple(_TOKEN.findall(name.lower()))
            if key:
                self.names[key] = name
                self.first[key[0]] = max(self.first.get(key[0], 0), len(key))

    def find(self, sentence: str) -> list[tuple[int, int, str]]:
        """(start char, end char, name) of the names in ``sentence`` (longest, no overlap)."""
        tokens = [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(sentence.lower())]
        out = []
        i = 0
        while i < len(tokens):
            longest = self.first.get(tokens[i][0], 0)
            hit = None
            for n in range(min(longest, len(tokens) - i), 0, -1):
                key = tuple(t[0] for t in tokens[i : i + n])
                if key in self.names:
                    hit = (tokens[i][1], tokens[i + n - 1][2], self.names[key], n)
                    break
            if hit:
                start, end, name, n = hit
                if _bounded(sentence, start, end):
                    out.append((start, end, name))
                i += n
            else:
                i += 1
        return out


def _bounded(sentence: str, start: int, end: int) -> bool:
    before = sentence[start - 1] if start else " "
    after = sentence[end] if end < len(sentence) else " "
    return before not in "-/" and after not in "-/" and not after.isalnum()


_FORM_WORDS = re.compile(
    r"\s+(?:injection|oral|topical|ophthalmic|nasal|transdermal|rectal|vaginal|otic|inhalation|"
    r"extended|sublingual|intravenous|buccal|implant|powder|solution|spray)\b.*$",
    re.I,
)
_COMMON_WORDS = _wordset(
    """iron oxygen water sodium potassium calcium zinc alcohol sugar salt fat air light heat
    cold pain fever cough stress fatigue sleep milk tea coffee honey garlic ginger aloe
    thyroid insulin estrogen estrogens progesterone testosterone glucagon melatonin dopamine
    serotonin cortisol hydrocortisone vitamin magnesium phosphorus folate protein"""
)


def drug_name(focus: str) -> str | None:
    """A drug lexicon entry from a MedQuAD drug focus (dosage-form words cut off)."""
    name = _FORM_WORDS.sub("", focus).strip().lower()
    if len(name) < 5 or "," in name or " and " in name or name in _COMMON_WORDS:
        return None
    if "vaccine" in name or name.startswith("vitamin"):
        return None
    if len(name.split()) > 3 or not re.fullmatch(r"[a-z][a-z0-9 '\-]+", name):
        return None
    return name


_DISEASE_LIKE = re.compile(
    r"(?:itis|osis|emia|aemia|oma|omas|pathy|plasia|trophy|ia|ism|iasis|algia|cele|ease|"
    r"syndrome|disorder|cancer|deficiency|infection|fever|palsy|diabetes|asthma|influenza|"
    r"measles|tumor|tumors|hernia|stroke|ulcer|ulcers|sclerosis|atresia|failure|injury|"
    r"defect|defects|pox|mumps|rubella|gout|lupus|acne|eczema|psoriasis|glaucoma|"
    r"cataract|cataracts|migraine|hypertension|obesity|autism)$"
)


def condition_name(focus: str) -> str | None:
    """A condition lexicon entry from a MedQuAD disorder focus (short plain names only)."""
    name = re.sub(r"\s*\(.*?\)\s*", " ", focus).strip().lower()
    if len(name) < 4 or "," in name or name in _COMMON_WORDS or len(name.split()) > 5:
        return None
    if not re.fullmatch(r"[a-z][a-z0-9 '\-]+", name) or name.startswith(("what ", "how ")):
        return None
    return name if _DISEASE_LIKE.search(name) else None


# ---------------------------------------------------------------- loading documents


def _document(
    doc_id: str,
    source: str,
    group: str,
    paragraphs: Sequence[str],
    focus: str = "",
    synonyms: Sequence[str] = (),
    seen: set[str] | None = None,
) -> Document | None:
    sentences: list[str] = []
    paras: list[int] = []
    for p, text in enumerate(paragraphs):
        for sentence in split_sentences(text):
            key = normalize(sentence)
            if not _clean_sentence(sentence) or (seen is not None and key in seen):
                continue
            if seen is not None:
                seen.add(key)
            sentences.append(sentence)
            paras.append(p)
    if len(sentences) < 2:
        return None
    return Document(doc_id, source, group, tuple(sentences), tuple(paras), focus, tuple(synonyms))


def load_medquad(root: Path) -> tuple[list[Document], Lexicons]:
    """MedQuAD documents with answer text, and the drug/condition lexicons of all focuses."""
    docs: list[Document] = []
    drugs: dict[str, None] = {}
    conditions: dict[str, None] = {}
    for file in sorted(root.glob("*/*.xml")):
        try:
            tree = ET.parse(file)
        except ET.ParseError:
            continue
        doc = tree.getroot()
        focus = (doc.findtext("Focus") or "").strip()
        cats = {(e.text or "").strip() for e in doc.iter("Category")}
        cats |= {(e.text or "").strip() for e in doc.iter("SemanticGroup")}
        if "Drug" in cats:
            name = drug_name(focus)
            if name:
                drugs[name] = None
        elif "Disease" in cats or ("Disorders" in cats and "Other" not in cats):
            name = condition_name(focus)
            if name:
                conditions[name] = None
        answers = [
            (a.text or "").replace(" - ", "\n")
            for a in doc.iter("Answer")
            if (a.text or "").strip()
        ]
        if not answers:
            continue
        synonyms = [(s.text or "").strip() for s in doc.iter("Synonym") if (s.text or "").strip()]
        doc_id = f"{file.parent.name.split('_')[0]}_{doc.get('id', file.stem)}"
        group = "medquad:" + (normalize(focus) or doc_id)
        seen: set[str] = set()
        made = _document(doc_id, "medquad", group, answers, focus, synonyms, seen)
        if made:
            docs.append(made)
    return docs, Lexicons(drugs=list(drugs), conditions=list(conditions))


def load_pubmedqa(path: Path) -> list[Document]:
    """PubMedQA abstracts (contexts + long answer) as documents."""
    data = json.loads(path.read_text())
    docs = []
    for pmid in sorted(data):
        row = data[pmid]
        paragraphs = [*row.get("CONTEXTS", []), row.get("LONG_ANSWER", "")]
        made = _document(pmid, "pubmedqa", f"pubmedqa:{pmid}", paragraphs)
        if made:
            docs.append(made)
    return docs


def load_retrieval(path: Path, name: str) -> list[Document]:
    """A retrieval corpus (``doc_id``, ``title``, ``text``): text only, one paragraph per line."""
    docs = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        paragraphs = [p for p in str(row.get("text", "")).split("\n") if p.strip()]
        group = f"{name}:{row['doc_id']}"
        made = _document(str(row["doc_id"]), f"retrieval-{name}", group, paragraphs)
        if made:
            docs.append(made)
    return docs


def _refuse_eval(path: Path) -> None:
    if any(tag in path.stem for tag in _FORBIDDEN):
        raise InputError(f"{path.name} is evaluation-only: not a corpus source")


def load_pair_evidence(path: Path, known: Sequence[Document] = ()) -> list[Document]:
    """Distinct evidence texts of an allowed train pair file (claims and labels unused).

    Evidence texts already present among ``known`` documents (same 8-gram fingerprint, e.g.
    Citation-Integrity evidence = a cited-paper document of the retrieval corpus) are skipped.
    """
    _refuse_eval(path)
    fingerprints: set[str] = set()
    for doc in known:
        words = normalize(" ".join(doc.sentences[:2])).split()
        fingerprints.add(" ".join(words[:8]))
    docs = []
    seen: set[str] = set()
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        evidence = str(row.get("evidence", ""))
        key = normalize(evidence)
        if not key or key in seen:
            continue
        seen.add(key)
        words = key.split()
        starts = range(max(1, len(words) - 7))
        if any(" ".join(words[i : i + 8]) in fingerprints for i in starts):
            continue
        meta = row.get("meta") or {}
        doc_id = str(meta.get("doc_id") or _hash(key))
        name = path.stem.replace("_train", "")
        made = _document(doc_id, f"pairs-{name}", f"{name}:{doc_id}", evidence.split("\n"))
        if made:
            docs.append(made)
    return docs


def load_sources(data_dir: Path) -> tuple[list[Document], Lexicons]:
    """Every allowed source under ``data_dir`` (``../shared/data``); missing ones are skipped."""
    docs: list[Document] = []
    lex = Lexicons()
    medquad = data_dir / "raw" / "medquad"
    if medquad.is_dir():
        mq_docs, lex = load_medquad(medquad)
        docs += mq_docs
    pubmedqa = data_dir / "raw" / "pubmedqa" / "pqal_dev500.json"
    if pubmedqa.is_file():
        docs += load_pubmedqa(pubmedqa)
    retrieval: list[Document] = []
    for name in ("checkcovid", "citint"):
        path = data_dir / "retrieval" / name / "corpus.jsonl"
        if path.is_file():
            retrieval += load_retrieval(path, name)
    docs += retrieval
    for name in TRAIN_PAIR_FILES:
        path = data_dir / "pairs" / f"{name}.jsonl"
        if path.is_file():
            docs += load_pair_evidence(path, retrieval)
    if not docs:
        raise InputError(f"no corpus sources found under {data_dir}")
    return docs, lex


# ---------------------------------------------------------------- boilerplate and idf


def drop_boilerplate(docs: list[Document], max_docs: int = 8) -> list[Document]:
    """Remove sentences repeated (focus name masked) in more than ``max_docs`` documents."""

    def template(doc: Document, sentence: str) -> str:
        text = sentence
        if doc.focus:
            text = re.sub(re.escape(doc.focus), "<f>", text, flags=re.I)
        return normalize(re.sub(r"\d+", "0", text))

    counts: Counter[str] = Counter()
    for doc in docs:
        counts.update({template(doc, s) for s in doc.sentences})
    out = []
    for doc in docs:
        keep = [i for i, s in enumerate(doc.sentences) if counts[template(doc, s)] <= max_docs]
        if len(keep) >= 2:
            out.append(
                Document(
                    doc.doc_id,
                    doc.source,
                    doc.group,
                    tuple(doc.sentences[i] for i in keep),
                    tuple(doc.paras[i] for i in keep),
                    doc.focus,
                    doc.synonyms,
                )
            )
    return out


def document_idf(docs: Sequence[Document]) -> dict[str, float]:
    """Inverse document frequency of content words over ``docs``."""
    df: Counter[str] = Counter()
    for doc in docs:
        df.update(set(content_words(" ".join(doc.sentences))))
    n = len(docs)
    return {w: math.log((n + 1) / (f + 0.5)) for w, f in df.items()}


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


# ---------------------------------------------------------------- leakage check


class LeakageIndex:
    """Exact (normalised text) and near (word 8-gram overlap) duplicates of evaluation texts."""

    def __init__(
        self, eval_sets: dict[str, Sequence[str]], n: int = 8, threshold: float = 0.8
    ) -> None:
        self.n = n
        self.threshold = threshold
        self.names = list(eval_sets)
        self.exact: dict[str, list[int]] = {}
        self.grams: dict[str, list[int]] = {}
        self.sizes: list[int] = []
        self.owner: list[int] = []
        for s, name in enumerate(self.names):
            for text in dict.fromkeys(eval_sets[name]):
                key = normalize(text)
                if not key:
                    continue
                self.exact.setdefault(key, []).append(s)
                grams = self._grams(key)
                index = len(self.sizes)
                self.sizes.append(len(grams))
                self.owner.append(s)
                for g in grams:
                    self.grams.setdefault(g, []).append(index)
        self._cache: dict[str, dict[str, str]] = {}

    def _grams(self, key: str) -> set[str]:
        words = key.split()
        return {" ".join(words[i : i + self.n]) for i in range(len(words) - self.n + 1)}

    def check(self, text: str) -> dict[str, str]:
        """``{eval set: "exact" | "near"}`` for the sets ``text`` duplicates (empty if none)."""
        key = normalize(text)
        if key in self._cache:
            return self._cache[key]
        hits: dict[str, str] = {self.names[s]: "exact" for s in self.exact.get(key, [])}
        grams = self._grams(key)
        if grams:
            counts: Counter[int] = Counter()
            for g in grams:
                found = self.grams.get(g)
                if found:
                    counts.update(found)
            for index, count in counts.items():
                if count >= self.threshold * min(len(grams), self.sizes[index]):
                    hits.setdefault(self.names[self.owner[index]], "near")
        if len(self._cache) < 500_000:
            self._cache[key] = hits
        return hits


def load_eval_sets(data_dir: Path) -> dict[str, list[str]]:
    """Claims and evidence texts of every dev/evaluation set (for the leakage check only)."""
    sets: dict[str, list[str]] = {}
    for name in EVAL_PAIR_FILES:
        path = data_dir / "pairs" / f"{name}.jsonl"
        if not path.is_file():
            continue
        texts: list[str] = []
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                texts += [str(row.get("claim", "")), str(row.get("evidence", ""))]
        sets[name] = texts
    path = data_dir / "answers" / "expertqa_val.jsonl"
    if path.is_file():
        claims: list[str] = []
        for line in path.read_text().splitlines():
            if line.strip():
                claims += [str(c.get("claim", "")) for c in json.loads(line).get("claims", [])]
        sets["answers/expertqa_val"] = claims
    return sets


# ---------------------------------------------------------------- supported restatements

_LEAD_DROP = re.compile(
    r"^(?:However|In addition|Additionally|Furthermore|Moreover|Similarly|Overall|In conclusion|"
    r"In summary|Thus|Therefore|As a result|Consequently|In this study|In our study|"
    r"In contrast|Interestingly|Notably|Importantly|Finally|Indeed|In general|"
    r"(?:Although|Though|While|Whereas|Because|Since|As)\s[^,]{3,120}?),\s+(?=[A-Za-z])"
)
_TRAIL_DROP = re.compile(
    r",\s+(?:which|including|such as|especially|particularly|because|although|while|"
    r"whereas|as well as|as shown|as described|as reported|respectively)\b[^.]*(?=\.$)"
)
_PAREN = re.compile(r"\s\([^()]{2,80}\)(?=[\s,.;])")


def clause_drop(sentence: str, rng: random.Random) -> str | None:
    """The sentence without a leading (discourse/concessive) or trailing clause, if it stands."""
    options: list[str] = []
    lead = _LEAD_DROP.match(sentence)
    if lead:
        rest = sentence[lead.end() :]
        if _n_words(rest) >= 5:
            options.append(rest[0].upper() + rest[1:])
    trail = _TRAIL_DROP.search(sentence)
    if trail:
        kept = sentence[: trail.start()] + sentence[trail.end() :]
        if _n_words(kept) >= 5:
            options.append(kept)
    paren = _PAREN.search(sentence)
    if paren and not re.search(r"\b[A-Z]{2,}\b", sentence[paren.end() :]):
        kept = sentence[: paren.start()] + sentence[paren.end() :]
        if _n_words(kept) >= 5:
            options.append(kept)
    return rng.choice(options) if options else None


_STARTERS = _wordset(
    """it this these they the in most some many about a an there he she his her its their
    people symptoms treatment for if when although however also such other each all both
    patients we our"""
)


_CONNECTIVES = _wordset("however but although also yet thus therefore moreover furthermore")


def fuse(first: str, second: str) -> str:
    """Two adjacent sentences as one claim ("A, and b." or "A; B.")."""
    head = first.rstrip(" .!")
    word = second.split()[0]
    bare = word.rstrip(",;:").lower()
    if bare in _CONNECTIVES:
        return f"{head}; {word.lower()}{second[len(word) :]}"
    if bare in _STARTERS and not word.isupper():
        return f"{head}, and {word.lower()}{second[len(word) :]}"
    return f"{head}; {second}"


_DEF = re.compile(r"((?:[A-Za-z][\w'\-]*\s+){1,10})\(([A-Z][A-Za-z0-9\-]{1,9})s?\)")


def abbreviations(sentences: Sequence[str]) -> list[tuple[int, str, str]]:
    """(sentence index, long form, abbreviation) definitions "long form (ABC)" in a document."""
    out = []
    seen: set[str] = set()
    for i, sentence in enumerate(sentences):
        for match in _DEF.finditer(sentence):
            abbr = match.group(2)
            letters = [c.lower() for c in abbr if c.isalpha()]
            if len(letters) < 2 or sum(c.isupper() for c in abbr) < 2 or abbr in seen:
                continue
            words = match.group(1).split()
            for k in range(max(1, len(letters) - 2), min(len(words), len(letters) + 2) + 1):
                cand = words[-k:]
                if cand[0].lower() in _STOP or cand[0][0].lower() != letters[0]:
                    continue
                text = " ".join(cand).lower()
                pos = 0
                for c in letters:
                    pos = text.find(c, pos)
                    if pos < 0:
                        break
                    pos += 1
                if pos > 0:
                    seen.add(abbr)
                    out.append((i, " ".join(cand), abbr))
                    break
    return out


_SYN_DEF = re.compile(
    r",?\s\(?(?:also|sometimes|commonly|formerly|previously)\s(?:called|known as|referred to as|"
    r"termed)\s([^,.;()]{3,60}?)(?=[,.;)]|\sor\s|\sis\s|\sare\s)",
    re.I,
)


def synonyms_of(doc: Document) -> list[tuple[int, str, str]]:
    """(defining sentence, focus name, synonym) pairs stated in the document's own text."""
    if not doc.focus:
        return []
    out = []
    focus = doc.focus
    for i, sentence in enumerate(doc.sentences):
        lower = sentence.lower()
        at = lower.find(focus.lower())
        if at < 0:
            continue
        for match in _SYN_DEF.finditer(sentence, at + len(focus)):
            if match.start() - (at + len(focus)) > 2:
                break
            for name in re.split(r",\s|\sor\s", match.group(1)):
                name = name.strip()
                if 3 <= len(name) <= 60 and name.lower() != focus.lower():
                    out.append((i, focus, name))
        for name in doc.synonyms:
            if name.lower() in lower and name.lower() != focus.lower() and len(name) <= 60:
                out.append((i, focus, name))
    return list(dict.fromkeys(out))


def _distinct(a: str, b: str) -> bool:
    """Neither name contained in the other (a real alternative name, not a shortening)."""
    a, b = normalize(a), normalize(b)
    return bool(a) and bool(b) and a not in b and b not in a


def _sub_once(text: str, old: str, new: str) -> str | None:
    """``text`` with the first ``old`` (whole words, any case) replaced by ``new`` as written
    (capitalised only at the start of the sentence)."""
    pattern = re.compile(r"(?<![\w-])" + re.escape(old) + r"(?![\w-])", re.I)
    match = pattern.search(text)
    if not match:
        return None
    if match.start() == 0:
        new = new[:1].upper() + new[1:]
    elif new[:1].isupper() and new[1:].islower():
        new = new[:1].lower() + new[1:]  # "Magnetic resonance imaging" mid-sentence
    return text[: match.start()] + new + text[match.end() :]


# ---------------------------------------------------------------- candidates


def _candidates(
    docs: Sequence[Document], lex: Lexicons, caps: dict[str, int], seed: int
) -> tuple[dict[str, list[Candidate]], list[str], list[str]]:
    """Candidates per edit type over documents in a seeded order, each type up to its cap.

    Also returns the drug and condition names seen in the corpus (the swap pools).
    """
    rng = random.Random(f"{seed}:cand")
    out: dict[str, list[Candidate]] = {t: [] for t in caps}
    drugs = _Matcher(lex.drugs)
    conditions = _Matcher(lex.conditions)
    seen_drugs: dict[str, None] = {}
    seen_conditions: dict[str, None] = {}
    order = list(range(len(docs)))
    rng.shuffle(order)

    def add(kind: str, cand: Candidate) -> None:
        if len(out[kind]) < caps[kind]:
            out[kind].append(cand)

    for d in order:
        doc = docs[d]
        sents = doc.sentences
        focus_key = normalize(doc.focus)
        protected = {focus_key, *(normalize(s) for s in doc.synonyms)} - {""}
        for i, sentence in enumerate(sents):
            ok = claimable(sentence)
            if ok:
                add("extract", Candidate("extract", d, i, i, sentence))
                add("bm25_hard", Candidate("bm25_hard", d, i, i, sentence))
                add("sentence_removed", Candidate("sentence_removed", d, i, i, sentence, i))
                add("same_doc_other", Candidate("same_doc_other", d, i, i, sentence, i))
                dropped = clause_drop(sentence, rng)
                if dropped and dropped != sentence:
                    add("clause_drop", Candidate("clause_drop", d, i, i, dropped))
                for kind, edit in EDITS.items():
                    if len(out[kind]) >= caps[kind]:
                        continue
                    changed = edit(sentence, rng)
                    if changed and normalize(changed) != normalize(sentence):
                        add(kind, Candidate(kind, d, i, i, changed))
                for kind, matcher, pool in (
                    ("drug_swap", drugs, seen_drugs),
                    ("condition_swap", conditions, seen_conditions),
                ):
                    found = [m for m in matcher.find(sentence) if normalize(m[2]) not in protected]
                    for m in found:
                        pool[m[2]] = None
                    if found:
                        start, end, _ = rng.choice(found)
                        add(kind, Candidate(kind, d, i, i, sentence, span=(start, end)))
            nxt = i + 1
            if (
                nxt < len(sents)
                and doc.paras[nxt] == doc.paras[i]
                and claimable(sentence, 4, 35)
                and claimable(sents[nxt], 4, 35)
                and _n_words(sentence) + _n_words(sents[nxt]) <= 60
            ):
                add("fusion", Candidate("fusion", d, i, nxt, fuse(sentence, sents[nxt])))
        for j, long_form, abbr in abbreviations(sents):
            for i, sentence in enumerate(sents):
                if i == j or not claimable(sentence) or abs(i - j) > 6:
                    continue
                lo, hi = min(i, j), max(i, j)
                if re.search(rf"(?<![\w-]){re.escape(abbr)}(?![\w-])", sentence):
                    if f"({abbr}" in sentence:
                        continue
                    new = _sub_once(sentence, abbr, long_form)
                elif long_form.lower() in sentence.lower():
                    new = _sub_once(sentence, long_form, abbr)
                else:
                    continue
                if new and new != sentence:
                    add("abbreviation", Candidate("abbreviation", d, lo, hi, new))
        for j, focus, name in synonyms_of(doc):
            for i, sentence in enumerate(sents):
                if i == j or not claimable(sentence) or abs(i - j) > 8:
                    continue
                new = _sub_once(sentence, focus, name) or _sub_once(sentence, name, focus)
                if new and new != sentence:
                    add("synonym", Candidate("synonym", d, min(i, j), max(i, j), new))
    return out, list(seen_drugs), list(seen_conditions)


# ---------------------------------------------------------------- building


def _window(
    doc: Document,
    lo: int,
    hi: int,
    rng: random.Random,
    max_words: int,
    exclude: int = -1,
    extra: int | None = None,
) -> str | None:
    """Consecutive sentences covering ``lo..hi`` (minus ``exclude``) plus random context."""
    lengths = [_n_words(s) for s in doc.sentences]
    first_para, last_para = doc.paras[lo], doc.paras[hi]
    total = sum(lengths[k] for k in range(lo, hi + 1) if k != exclude)
    if total > max_words:
        return None
    a, b = lo, hi
    want = rng.randint(0, 4) if extra is None else extra
    for _ in range(want):
        sides = []
        if a - 1 >= 0 and doc.paras[a - 1] == first_para:
            sides.append(-1)
        if b + 1 < len(lengths) and doc.paras[b + 1] == last_para:
            sides.append(1)
        if not sides:
            break
        side = rng.choice(sides)
        k = a - 1 if side < 0 else b + 1
        if total + lengths[k] > max_words:
            break
        total += lengths[k]
        a, b = min(a, k), max(b, k)
    chosen = [doc.sentences[k] for k in range(a, b + 1) if k != exclude]
    return " ".join(chosen) if chosen else None


class _Builder:
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
        self.drugs = drugs
        self.conditions = conditions
        self.idf = idf
        self.seed = seed
        self.max_words = max_words
        self._index: PassageIndex | None = None
        self.passages: list[tuple[int, str]] = []

    def index(self) -> PassageIndex:
        if self._index is None:
            rng = random.Random(f"{self.seed}:passages")
            for d, doc in enumerate(self.docs):
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
            self._index = PassageIndex([t for _, t in self.passages])
        return self._index

    def make(self, cand: Candidate, rng: random.Random) -> tuple[str, str] | None:
        """(claim, evidence) of a candidate, or None if it cannot be completed."""
        doc = self.docs[cand.doc]
        kind = cand.edit_type
        claim = cand.claim
        if kind in ("drug_swap", "condition_swap") and cand.span:
            pool = self.drugs if kind == "drug_swap" else self.conditions
            start, end = cand.span
            old = normalize(claim[start:end])
            protected = {normalize(doc.focus), *(normalize(s) for s in doc.synonyms)}
            ev_probe = " ".join(doc.sentences).lower()
            for _ in range(8):
                new = rng.choice(pool) if pool else ""
                if (
                    new
                    and normalize(new) != old
                    and normalize(new) not in protected
                    and (new not in ev_probe)
                ):
                    claim = claim[:start] + _keep_case(claim[start:end], new) + claim[end:]
                    break
            else:
                return None
        if kind == "bm25_hard":
            index = self.index()
            for p in index.top(claim, k=30):
                d, text = self.passages[p]
                if self.docs[d].group != doc.group and lacks_key_content(claim, text, self.idf):
                    return claim, text
            return None
        if kind == "same_doc_other":
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
        if kind == "sentence_removed":
            evidence = _window(
                doc, cand.lo, cand.hi, rng, self.max_words, cand.lo, extra=rng.randint(2, 6)
            )
            if evidence and lacks_key_content(claim, evidence, self.idf):
                return claim, evidence
            return None
        evidence = _window(doc, cand.lo, cand.hi, rng, self.max_words)
        return (claim, evidence) if evidence else None


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
    per_label = {label: size // 3 + (1 if i < size % 3 else 0) for i, label in enumerate(LABELS)}
    caps = {}
    for label, (_, types) in FAMILIES.items():
        for t in types:
            caps[t] = int(cap_factor * per_label[label] / len(types)) + 50
    cands, seen_drugs, seen_conditions = _candidates(docs, lex, caps, seed)
    builder = _Builder(docs, seen_drugs, seen_conditions, idf, seed, max_words)
    leakage = LeakageIndex(eval_sets or {})
    leak_counts: dict[str, Counter[str]] = {name: Counter() for name in leakage.names}
    hashes: set[str] = set()
    dropped = Counter()
    pairs: list[CorpusPair] = []
    for label, (generator, types) in FAMILIES.items():
        pools = {}
        for t in types:
            pool = list(cands[t])
            random.Random(f"{seed}:{t}").shuffle(pool)
            pools[t] = pool
        cursor = dict.fromkeys(types, 0)
        made = dict.fromkeys(types, 0)
        need = per_label[label]
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
                    result = builder.make(cand, rng)
                    if result is None:
                        dropped[f"incomplete:{t}"] += 1
                        continue
                    claim, evidence = result
                    key = _hash(normalize(claim) + "\x00" + normalize(evidence))
                    if key in hashes:
                        dropped["duplicate"] += 1
                        continue
                    hits_c = leakage.check(claim)
                    hits_e = leakage.check(evidence)
                    if hits_c or hits_e:
                        for name, kind in hits_c.items():
                            leak_counts[name][f"claim_{kind}"] += 1
                        for name, kind in hits_e.items():
                            leak_counts[name][f"evidence_{kind}"] += 1
                        dropped["leakage"] += 1
                        continue
                    hashes.add(key)
                    doc = docs[cand.doc]
                    pairs.append(
                        CorpusPair(
                            id=f"{t}:{doc.source}:{doc.doc_id}:{cand.lo}:{len(pairs)}",
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
                    made[t] += 1
                    need -= 1
    random.Random(f"{seed}:order").shuffle(pairs)
    report = {
        "size": len(pairs),
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
        **count_table(pairs),
        "dropped": dict(sorted(dropped.items())),
        "leakage": {name: dict(sorted(c.items())) for name, c in leak_counts.items()},
        "seconds": round(time.monotonic() - started, 1),
    }
    return BuildResult(pairs, report)


def count_table(pairs: Iterable[CorpusPair]) -> dict[str, dict]:
    """Counts per label, per generator/edit type (with label), per source, per source x label."""
    pairs = list(pairs)
    by_type: Counter[str] = Counter(f"{p.generator}/{p.edit_type}" for p in pairs)
    by_source: Counter[str] = Counter(p.source for p in pairs)
    by_source_label: Counter[str] = Counter(f"{p.source}/{p.label}" for p in pairs)
    return {
        "by_label": dict(sorted(Counter(p.label for p in pairs).items())),
        "by_edit_type": dict(sorted(by_type.items())),
        "by_source": dict(sorted(by_source.items())),
        "by_source_label": dict(sorted(by_source_label.items())),
        "groups": {"n": len({p.group for p in pairs})},
    }


def format_count_table(report: dict) -> str:
    """The count table of a build report as markdown."""
    lines = ["| family / edit type | pairs |", "|---|---|"]
    lines += [f"| {k} | {v:,} |" for k, v in report["by_edit_type"].items()]
    lines += ["", "| label | pairs |", "|---|---|"]
    lines += [f"| {k} | {v:,} |" for k, v in report["by_label"].items()]
    lines += ["", "| source | pairs |", "|---|---|"]
    lines += [f"| {k} | {v:,} |" for k, v in report["by_source"].items()]
    return "\n".join(lines)


def write_jsonl_gz(pairs: Iterable[CorpusPair], out: Path) -> None:
    """Write pairs as gzip JSON lines, atomically (temporary file in the folder, then rename).

    The gzip header carries no name or time, so equal pairs give byte-identical files.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with (
            open(tmp, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as zipped,
            io.TextIOWrapper(zipped, encoding="utf-8") as handle,
        ):
            for pair in pairs:
                handle.write(json.dumps(pair.to_dict(), ensure_ascii=False) + "\n")
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()


def read_jsonl_gz(path: Path) -> list[CorpusPair]:
    """Pairs written by :func:`write_jsonl_gz`."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [CorpusPair(**json.loads(line)) for line in handle if line.strip()]
