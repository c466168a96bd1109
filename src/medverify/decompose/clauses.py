"""English clause splitting for the rule decomposer: a sentence whose predicates share a
subject becomes one claim per predicate (:func:`split_coordination`), and independent
clauses joined by semicolons are split apart (:func:`split_semicolons`).

Both are conservative: they split only where a small English verb lexicon (base, third
person and past forms, auxiliaries, modals) says the right-hand side starts a predicate
that agrees with the verb after a simple subject.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple


def _wordlist(words: str) -> list[str]:
    return words.split()


def _wordset(words: str) -> frozenset[str]:
    return frozenset(words.split())


# Coordination: "Metformin lowers blood glucose and reduces hepatic glucose production."
# -> "Metformin lowers blood glucose." + "Metformin reduces hepatic glucose production."

_VERB_BASES = _wordlist(
    "lower reduce increase decrease raise elevate cause treat prevent improve inhibit block "
    "bind activate stimulate help lead relieve affect require contain produce promote protect "
    "slow kill trigger worsen regulate enhance impair suppress induce occur develop appear "
    "interact metabolize metabolise excrete eliminate absorb cross reach remain become provide "
    "support cure manage alleviate ease lessen limit minimize boost strengthen weaken restore "
    "repair replace secrete convert carry transport deliver enter attack destroy infect invade "
    "benefit reverse delay shorten prolong extend maintain make take give show mimic differ "
    "depend rely involve indicate suggest predict detect diagnose identify confirm dilate "
    "constrict relax thin thicken bleed heal recover live die survive grow shrink divide "
    "multiply replicate mutate express encode modulate mediate facilitate counteract "
    "antagonize potentiate sensitize attenuate exacerbate aggravate mitigate combat fight "
    "neutralize dissolve irritate soothe hydrate nourish cleanse flush clear remove lose gain "
    "burn characterize define describe represent associate correlate contribute serve tend "
    "continue begin fail succeed allow enable permit prompt widen narrow persist resolve "
    "subside recur relapse progress migrate circulate pump digest filter detoxify synthesize "
    "synthesise degrade oxidize stabilize lengthen accelerate worsen decline improve affect "
    "target damage control result work use need release form act rise fall drop return "
    "recommend advise approve indicate administer prescribe"
)
# Verbs also common as nouns: their bare form never starts a split-off predicate.
_NOUN_LIKE = _wordset(
    "target damage control result work use need release form act rise fall drop return help "
    "cause increase decrease support benefit show delay limit progress burn cure"
)
_IRREGULAR_PAST = {
    "lead": ("led",), "make": ("made",), "take": ("taken", "took"), "give": ("given", "gave"),
    "show": ("shown", "showed"), "become": ("became",), "grow": ("grown", "grew"),
    "fall": ("fallen", "fell"), "rise": ("risen", "rose"), "lose": ("lost",),
    "begin": ("begun", "began"), "bind": (), "drop": ("dropped",), "slow": ("slowed",),
    "control": ("controlled",), "occur": ("occurred",), "permit": ("permitted",),
}
_MODALS = _wordset("can cannot can't may might could should will would must shall")
_DO = _wordset("do does did doesn't don't didn't")
_BE_HAVE = _wordset("is are was were be been has have had isn't aren't wasn't weren't")
_AUX = _MODALS | _DO | _BE_HAVE
_AUX_THIRD = frozenset({"is", "has", "does", "was", "isn't", "doesn't", "wasn't", "hasn't"})
_AUX_TAIL = _wordset("not never also often usually generally typically commonly be been")
_SKIP_ADVERBS = _wordset(
    "also often usually typically generally further thereby then significantly frequently "
    "commonly rarely sometimes additionally"
)
_PASSIVE_FOLLOWERS = _wordset(
    "by in into to from with for at via through during within as on over after before "
    "unchanged primarily mainly mostly rapidly slowly quickly well largely only"
)
_SUBJECT_STOP = _wordset(
    "and or both either neither which that who whom whose where when while if although "
    "though because since unless whereas as after before until once how what why whether "
    "nor"
)
_CLAUSE_STOP = _SUBJECT_STOP - {"and", "or", "both", "either", "neither", "nor", "as"}
_CONJUNCTIONS = frozenset({"and", "but"})
_MAX_SUBJECT_TOKENS = 8
_MAX_SPLIT_CHARS = 600
_NON_SPACE = re.compile(r"\S+")
_COORDINATED_WORD = re.compile(
    r"(?:\b(?:and|but)|,)\s+(?:(?:also|often|usually|typically|generally|further|thereby|then"
    r"|significantly|frequently|commonly|rarely|sometimes|additionally)\s+)*([A-Za-z']+)"
)


def _third_person(verb: str) -> str:
    if verb.endswith(("s", "x", "z", "ch", "sh", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def _past(verb: str) -> tuple[str, ...]:
    if verb in _IRREGULAR_PAST:
        return _IRREGULAR_PAST[verb]
    if verb.endswith("e"):
        return (verb + "d",)
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        return (verb[:-1] + "ied",)
    return (verb + "ed",)


_BASE = frozenset(_VERB_BASES)
_THIRD_PERSON = frozenset(_third_person(v) for v in _VERB_BASES)
_PAST = frozenset(p for v in _VERB_BASES for p in _past(v))

VerbClass = Literal["aux", "third", "base", "past"]


class _Token(NamedTuple):
    start: int
    end: int
    word: str
    comma_after: bool
    depth: int


def _word(token: str) -> str:
    return token.strip("\"'“”‘’()[]*_,.;:!?").lower()


def _tokens(text: str) -> list[_Token]:
    if "(" not in text and "[" not in text:
        return [_Token(m.start(), m.end(), _word(m.group()), m.group().endswith(","), 0)
                for m in _NON_SPACE.finditer(text)]
    tokens = []
    depth = 0
    for match in _NON_SPACE.finditer(text):
        raw = match.group()
        depth += raw.count("(") + raw.count("[")
        tokens.append(_Token(match.start(), match.end(), _word(raw), raw.endswith(","), depth))
        depth -= raw.count(")") + raw.count("]")
    return tokens


def _verb_class(word: str) -> VerbClass | None:
    if word in _AUX:
        return "aux"
    if word in _THIRD_PERSON:
        return "third"
    if word in _PAST:
        return "past"
    if word in _BASE:
        return "base"
    return None


def _main_verb(tokens: Sequence[_Token], right: VerbClass) -> int | None:
    """Index of the left clause's verb that a right predicate of class ``right`` can share
    a subject with, when the subject before it is simple (no comma, bracket, conjunction
    or subordinate word). Unambiguous verb forms are preferred over bare forms."""
    window: list[int] = []
    for i, token in enumerate(tokens[: _MAX_SUBJECT_TOKENS + 1]):
        if token.word in _SUBJECT_STOP or token.depth:
            break
        window.append(i)
        if token.comma_after:
            break
    for accepts in _AGREEMENT[right]:
        found = next((i for i in window[1:] if accepts(tokens[i].word)), None)
        if found is not None:
            return None if any(tokens[k].comma_after for k in window[:found]) else found
    return None


def _is_third(word: str) -> bool:
    return word in _THIRD_PERSON or word in _AUX_THIRD


def _is_finite(word: str) -> bool:
    return word in _AUX or word in _THIRD_PERSON or word in _PAST


_AGREEMENT: dict[VerbClass, tuple[Callable[[str], bool], ...]] = {
    "aux": (_is_finite,),
    "third": (_is_third,),
    "base": (lambda w: w in _MODALS or w in _DO, lambda w: w in _BASE and w not in _NOUN_LIKE),
    "past": (lambda w: w in _BE_HAVE or w in _PAST,),
}


def _right_verb(tokens: Sequence[_Token], at: int) -> tuple[int, VerbClass] | None:
    """The verb starting the predicate at ``at`` (after skipped adverbs), if any."""
    i = at
    while i < len(tokens) - 1 and tokens[i].word in _SKIP_ADVERBS:
        i += 1
    if i >= len(tokens) - 1 or tokens[i + 1].word == "of":
        return None
    word = tokens[i].word
    verb = _verb_class(word)
    if verb == "base" and word in _NOUN_LIKE:
        return None
    if verb == "past" and tokens[i + 1].word not in _PASSIVE_FOLLOWERS:
        return None
    return (i, verb) if verb else None


@dataclass(frozen=True, slots=True)
class _Split:
    at: int
    resume: int
    prefix: str


def _split_points(text: str, tokens: Sequence[_Token]) -> list[_Split]:
    splits: list[_Split] = []
    for j in range(2, len(tokens) - 1):
        token = tokens[j]
        if token.depth:
            continue
        split = _split_at(text, tokens, j)
        if split is not None:
            splits.append(split)
    return splits


def _split_at(text: str, tokens: Sequence[_Token], j: int) -> _Split | None:
    is_conj = tokens[j].word in _CONJUNCTIONS and text[tokens[j].end - 1].isalpha()
    after_comma = tokens[j - 1].comma_after and not is_conj
    if not (is_conj or after_comma):
        return None
    found = _right_verb(tokens, j + 1 if is_conj else j)
    if found is None:
        return None
    verb = found[1]
    main = _main_verb(tokens[:j], verb)
    if main is None or j - main < 2 or _has_clause_stop(tokens, main, j):
        return None
    prefix = text[: tokens[main].start] + _aux_phrase(text, tokens, main, verb)
    return _Split(j, j + 1 if is_conj else j, prefix)


def _has_clause_stop(tokens: Sequence[_Token], main: int, j: int) -> bool:
    return any(t.word in _CLAUSE_STOP for t in tokens[main + 1: j])


def _aux_phrase(text: str, tokens: Sequence[_Token], main: int, right: VerbClass) -> str:
    """The auxiliary the right predicate shares ("can", "does not", "is"), if it needs one."""
    word = tokens[main].word
    needs = (right == "base" and (word in _MODALS or word in _DO)) or (
        right == "past" and word in _BE_HAVE)
    if not needs:
        return ""
    end = main
    while end + 1 < len(tokens) and tokens[end + 1].word in _AUX_TAIL and end - main < 2:
        end += 1
    return text[tokens[main].start: tokens[end].end] + " "


def _may_coordinate(raw: str) -> bool:
    """Cheap pre-check: does a verb form follow "and", "but" or a comma anywhere?"""
    return any(_verb_class(m.group(1).lower()) for m in _COORDINATED_WORD.finditer(raw))


def split_coordination(raw: str) -> list[str]:
    """Split a raw segment into clauses sharing its subject. Conservative: only predicates
    joined by "and"/"but" or a comma whose verb agrees with the first verb after a simple
    subject; never inside brackets or after a subordinate word (which, that, if, ...)."""
    if len(raw) > _MAX_SPLIT_CHARS or not _may_coordinate(raw):
        return [raw]
    tokens = _tokens(raw)
    splits = _split_points(raw, tokens)
    if not splits:
        return [raw]
    parts = [raw[: tokens[splits[0].at].start]]
    for k, split in enumerate(splits):
        end = tokens[splits[k + 1].at].start if k + 1 < len(splits) else len(raw)
        parts.append(split.prefix + raw[tokens[split.resume].start: end])
    return [p for p in parts if p.strip()]


def split_semicolons(raw: str) -> list[str]:
    """Split at semicolons (outside brackets) when both sides have three words or more."""
    if len(raw) > _MAX_SPLIT_CHARS or ";" not in raw:
        return [raw]
    parts: list[str] = []
    depth = 0
    last = 0
    for i, char in enumerate(raw):
        depth += (char in "([") - (char in ")]")
        if char == ";" and depth <= 0 and _words(raw[last:i]) >= 3 and _words(raw[i + 1:]) >= 3:
            parts.append(raw[last:i])
            last = i + 1
    parts.append(raw[last:])
    return parts


def _words(text: str) -> int:
    return len(text.split())
