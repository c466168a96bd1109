"""The ``contradicted`` family: one typed edit of a sentence (:data:`EDITS`: negation, number,
unit, dose/frequency, population, direction, temporal/causal, quantifier).

The edits of a quantity (number, unit, dose/frequency) are in
:mod:`medverify.verifier.corpus.quantities`; the drug and condition swaps of the same family
are in :mod:`medverify.verifier.corpus.entities`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from medverify.verifier.corpus.quantities import edit_dose_frequency, edit_number, edit_unit
from medverify.verifier.corpus.records import Candidate, CandidatePools
from medverify.verifier.corpus.text import _keep_case, _replace_span, _wordset, normalize

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


def add_edits(pools: CandidatePools, d: int, i: int, sentence: str, rng: random.Random) -> None:
    """One candidate per edit type (not yet full) whose edit changes sentence ``i`` of doc ``d``."""
    for kind, edit in EDITS.items():
        if pools.full(kind):
            continue
        changed = edit(sentence, rng)
        if changed and normalize(changed) != normalize(sentence):
            pools.add(Candidate(kind, d, i, i, changed))
