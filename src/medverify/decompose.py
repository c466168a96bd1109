"""Claim decomposition: an answer becomes a list of atomic, checkable :class:`Claim` records.

Two decomposers share one seam (:class:`Decomposer`) and one registry (:data:`DECOMPOSERS`):

- ``rules`` (:class:`RuleDecomposer`): offline and deterministic. It segments the answer
  into sentences and list items, drops what makes no checkable claim (questions,
  greetings, disclaimers, headings, list lead-ins), strips citation markers into
  ``Claim.markers`` and splits coordinated predicates that share a subject.
- ``llm`` (:class:`LLMDecomposer`): asks a chat model for atomic, self-contained claims,
  giving it the answer as numbered segments from the same segmenter; the model names the
  segment each claim comes from and the span is taken from our own segmentation.

Every claim's ``span`` is the exact offset range of its source segment in ``answer.text``
and ``sentence`` is that segment's index in :func:`segment` output. See docs/decompose.md.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, ValidationError

from medverify.citations import normalize_marker, strip_markers, tidy, unique
from medverify.errors import ConfigError, ParseError
from medverify.prompts import load_prompt
from medverify.prompts.untrusted import defuse, load_json_reply, validation_detail
from medverify.records import Answer, Claim, Span
from medverify.registry import Registry

if TYPE_CHECKING:
    from medverify.llm.facade import Model

log = logging.getLogger(__name__)

SegmentKind = Literal["sentence", "item", "heading"]


@runtime_checkable
class Decomposer(Protocol):
    """Turns an answer into claims. ``name`` is the registry name; ``prompt_version`` is
    the prompt id (``"decompose/v1"``) for model-based decomposers, else None."""

    name: str
    prompt_version: str | None

    async def decompose(self, answer: Answer) -> list[Claim]: ...


# --------------------------------------------------------------------------- segmentation

class Segment(NamedTuple):
    """A sentence, list item or heading of an answer: ``text == answer[start:end]``.

    ``lead`` is the lead-in of the list an item belongs to (``"Symptoms include"`` for
    ``"Symptoms include:\\n- fever"``), without its colon and markers.
    """

    index: int
    start: int
    end: int
    text: str
    kind: SegmentKind
    lead: str | None = None


@dataclass(slots=True)
class _Block:
    start: int
    end: int
    kind: Literal["para", "item", "heading"]
    lead: str | None = None


def _wordlist(words: str) -> list[str]:
    return words.split()


def _wordset(words: str) -> frozenset[str]:
    return frozenset(words.split())


_LIST_MARK = re.compile(r"[ \t]*(?:[-*+•▪‣◦·–]|\d{1,3}[.)]|[a-z][.)]|\(\d{1,3}\)|\([a-z]\))[ \t]+")
_QUOTE_MARK = re.compile(r"[ \t]*(?:>[ \t]?)+")
_HEADING_MARK = re.compile(r"[ \t]*#{1,6}[ \t]+")
_BOLD_LINE = re.compile(r"(\*\*|__)[^.!?\n]{1,200}?\1[ \t]*:?[ \t]*")
_ALNUM = re.compile(r"[^\W_]")
_TERMINAL = ".!?:;"
_SENTENCE_END = re.compile(
    r"[.!?…]+[\"'”’)\]*_]*(?:\s{0,3}\[\s*\^?\d{1,4}(?:\s*[-–,;]\s*\^?\d{1,4}){0,20}\s*\])*(?=\s|$)"
)
_WORD_BEFORE = re.compile(r"(\S{1,40})$")
_NEVER_SPLIT_AFTER = frozenset({
    "e.g", "i.e", "eg", "ie", "vs", "viz", "cf", "approx", "ca", "resp", "incl", "dr", "drs",
    "mr", "mrs", "ms", "prof", "st", "sr",
})
# Place abbreviations end a sentence only when a typical sentence opener follows.
_PLACE_ABBREVIATIONS = frozenset({"u.s", "u.k", "u.n", "e.u", "u.s.a"})
_SENTENCE_OPENERS = _wordset(
    "the this these that those it its he she they we you i in a an however there for as at "
    "on if when some most many patients people his her their our"
)
_NO_SPLIT_BEFORE_NUMBER = frozenset({
    "no", "nos", "fig", "figs", "p", "pp", "vol", "ref", "refs", "eq", "tab", "ch", "sec",
    "art", "n", "al", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct",
    "nov", "dec",
})
_LETTER_NOUNS = frozenset({
    "vitamin", "hepatitis", "type", "group", "class", "grade", "stage", "phase", "factor",
    "protein", "influenza", "complex", "category", "schedule", "part", "plan", "cluster",
})


def segment(text: str) -> list[Segment]:
    """Split ``text`` into sentences, list items and headings, in order (linear time).

    Segments without any letter or digit (rules, table borders) are left out.
    """
    segments: list[Segment] = []
    for block in _blocks(text):
        kind: SegmentKind = {"para": "sentence", "item": "item", "heading": "heading"}[block.kind]
        spans = [(block.start, block.end)] if kind == "heading" else _sentences(text, block)
        for span in spans:
            start, end = _trim(text, *span)
            piece = text[start:end]
            if _ALNUM.search(piece):
                segments.append(Segment(len(segments), start, end, piece, kind, block.lead))
    return segments


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    start = _skip_space(text, start, end)
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _lines(text: str) -> Iterator[tuple[int, int]]:
    pos = 0
    while pos <= len(text):
        newline = text.find("\n", pos)
        end = len(text) if newline == -1 else newline
        yield pos, end
        pos = end + 1


def _blocks(text: str) -> Iterator[_Block]:
    """Paragraph, list-item and heading blocks. A line continues the previous block when it
    is a soft wrap (previous line unfinished, this one starting in lower case) or an
    indented continuation of a list item."""
    current: _Block | None = None
    lead: str | None = None
    for line_start, line_end in _lines(text):
        start, end, kind = _classify_line(text, line_start, line_end)
        if kind == "blank":
            continue
        if current is not None and kind == "para" and _continues(text, current, start, line_start):
            current.end = end
            continue
        if current is not None:
            lead = _next_lead(text, current, lead)
            yield current
        current = _Block(start, end, kind, lead if kind == "item" else None)
    if current is not None:
        yield current


def _classify_line(text: str, start: int, end: int) -> tuple[int, int, str]:
    line = text[start:end]
    quote = _QUOTE_MARK.match(line)
    if quote:
        start, line = start + quote.end(), line[quote.end():]
    stripped = line.rstrip()
    end = start + len(stripped)
    if not stripped.strip():
        return start, end, "blank"
    for pattern, kind in ((_HEADING_MARK, "heading"), (_LIST_MARK, "item")):
        found = pattern.match(line)
        if found and found.end() < len(stripped):
            return start + found.end(), end, kind
    indent = len(line) - len(line.lstrip())
    if _BOLD_LINE.fullmatch(stripped.strip()):
        return start + indent, end, "heading"
    return start + indent, end, "para"


def _continues(text: str, block: _Block, start: int, line_start: int) -> bool:
    if block.kind == "heading":
        return False
    if block.kind == "item" and start > line_start:
        return True
    if not text[start].islower():
        return False
    previous = strip_markers(text[max(block.start, block.end - 200):block.end])[0]
    return bool(previous) and previous[-1] not in _TERMINAL


def _next_lead(text: str, block: _Block, lead: str | None) -> str | None:
    """The lead-in for the items after ``block``: its last sentence when that ends with a
    colon; items keep the current lead; any other paragraph or heading resets it."""
    if block.kind == "item":
        return lead
    if ":" not in text[max(block.start, block.end - 60):block.end]:
        return None
    tail = _clean(text[max(block.start, block.end - 300):block.end])
    if not tail.endswith(":"):
        return None
    last = _clean(text[_last_sentence_start(text, block):block.end])
    return last[:-1].strip() or None


def _last_sentence_start(text: str, block: _Block) -> int:
    spans = _sentences(text, block)
    return spans[-1][0] if spans else block.start


def _sentences(text: str, block: _Block) -> list[tuple[int, int]]:
    """Sentence spans inside a block, trimmed of surrounding whitespace."""
    spans = []
    start = block.start
    for match in _SENTENCE_END.finditer(text, block.start, block.end):
        after = _skip_space(text, match.end(), block.end)
        if after >= block.end or not _is_boundary(text, start, match, after):
            continue
        spans.append((start, match.end()))
        start = after
    if start < block.end:
        spans.append((start, block.end))
    return spans


def _skip_space(text: str, pos: int, end: int) -> int:
    while pos < end and text[pos].isspace():
        pos += 1
    return pos


def _is_boundary(text: str, start: int, match: re.Match[str], after: int) -> bool:
    """Is the end-punctuation in ``match`` a sentence boundary, given the next character
    at ``after``? Lower-case continuations and known abbreviations are not."""
    following = text[after]
    if following.islower():
        return False
    punct = match.group(0)
    if not punct.startswith(".") or punct.startswith(".."):
        return True
    word_match = _WORD_BEFORE.search(text, max(start, match.start() - 40), match.start())
    if word_match is None:
        return True
    word = word_match.group(1).lstrip("(\"'“‘[*_").lower()
    return _period_ends_sentence(text, word, word_match.start(), following)


def _period_ends_sentence(text: str, word: str, word_start: int, following: str) -> bool:
    if word in _NEVER_SPLIT_AFTER:
        return False
    if word in _PLACE_ABBREVIATIONS:
        return _next_word(text, word_start) in _SENTENCE_OPENERS
    if word in _NO_SPLIT_BEFORE_NUMBER and (following.isdigit() or following == "("):
        return False
    if len(word) == 1 and word.isalpha():
        return not _is_initial(text, word_start)
    return True


def _next_word(text: str, word_start: int) -> str:
    following = re.compile(r"\S+\s+(\w+)").match(text, word_start, word_start + 80)
    return following.group(1).lower() if following else ""


def _is_initial(text: str, word_start: int) -> bool:
    """A single capital letter before a period is an initial ("John F. Kennedy") unless the
    word before it takes a letter ("vitamin D.", "hepatitis B.")."""
    before = _WORD_BEFORE.search(text, max(0, word_start - 40), max(0, word_start - 1))
    if before is None:
        return False
    previous = before.group(1).strip("(\"'“‘*_,")
    if previous.lower() in _LETTER_NOUNS:
        return False
    return previous[:1].isupper()


# --------------------------------------------------------------------------- claim rules

_EMPHASIS = re.compile(r"\*\*|__|`|(?<![\w*])\*(?=\S)|(?<=\S)\*(?![\w*])")
_GREETING = re.compile(
    r"(?:(?:that'?s |what )?an? (?:great|good|excellent|interesting) question"
    r"|(?:great|good|excellent|interesting) question"
    r"|thanks? (?:you )?(?:so much )?for (?:asking|your question|reaching out|sharing)"
    r"|i hope (?:this|that|the above|my answer)\b.{0,40}\b(?:helps?|answers?|clarif)"
    r"|hope (?:this|that) helps|(?:please )?let me know if|feel free to"
    r"|i(?:'d| would| am|'m) (?:be )?(?:happy|glad) to|happy to help|glad you asked"
    r"|stay (?:safe|healthy|well)|take care|best wishes|good luck|wishing you"
    r"|(?:please )?(?:see|visit|check out|refer to)\b|for more (?:information|details)\b)",
    re.IGNORECASE,
)
_INTERJECTION = re.compile(
    r"(?:hi|hello|hey|dear \w+|sure|certainly|of course|absolutely|okay|ok|great|thanks"
    r"|thank you|yes|no)\b", re.IGNORECASE,
)
_PROFESSIONAL = (
    r"(?:doctors?|physicians?|health ?care|health-care|pharmacists?|providers?|professionals?"
    r"|clinicians?|specialists?|gp|nurses?|medical team|care team|dentists?|dermatologists?)"
)
_DISCLAIMER = re.compile(
    r"\bi(?:'m| am) not an? (?:doctor|physician|medical|healthcare|licensed)"
    r"|\bas an ai\b|\bi(?:'m| am) an ai\b|\bi can(?:not|'t| not) (?:provide|give|offer) "
    r"(?:medical|a diagnosis|personal)"
    r"|\b(?:is )?not (?:a )?(?:substitute|replacement) for (?:professional|medical|expert)"
    r"|\b(?:this|it|that) is not (?:intended as |meant as |meant to be |to be taken as )?"
    r"(?:medical|professional|personal(?:ized)? medical) advice"
    r"|\bnot (?:intended|meant) (?:as|to be|to replace|to provide) (?:medical|professional)"
    r"|\bfor (?:general )?(?:informational|educational) purposes only"
    rf"|\b(?:consult|consulting|talk to|talk with|talking to|speak to|speak with|check with"
    rf"|ask|see|contact|reach out to|seek (?:advice|guidance) from) (?:with )?"
    rf"(?:your|a|an|the)? ?(?:[\w-]+ ){{0,3}}{_PROFESSIONAL}\b",
    re.IGNORECASE,
)
_DISCLAIMER_HINTS = (
    "doctor", "physician", " ai", "advice", "substitute", "replacement", "purposes", "health",
    "pharmacist", "provider", "professional", "clinician", "specialist", "gp", "nurse", "team",
    "dentist", "dermatologist",
)
_MAX_FRAGMENT_WORDS = 6
_MIN_CLAIM_WORDS = 3
_MAX_TITLE_WORDS = 8


def clean_text(raw: str) -> tuple[str, list[str]]:
    """Claim text of a raw segment (markers, links and markdown emphasis removed, whitespace
    tidied) and the segment's marker labels."""
    text, markers = strip_markers(raw)
    if "*" in text or "_" in text or "`" in text:
        text = tidy(_EMPHASIS.sub("", text))
    return text, markers


def _clean(raw: str) -> str:
    return clean_text(raw)[0]


def is_droppable(text: str) -> bool:
    """True for cleaned segment text that makes no checkable claim: a question, a greeting
    or pleasantry, a disclaimer or advice to consult a professional, a list lead-in."""
    if not text or text.endswith(("?", ":")):
        return True
    if _GREETING.match(text) or (_may_disclaim(text) and _DISCLAIMER.search(text)):
        return True
    return _INTERJECTION.match(text) is not None and len(text.split()) <= 4


def _may_disclaim(text: str) -> bool:
    lower = text.lower()
    return any(hint in lower for hint in _DISCLAIMER_HINTS)


def _is_fragment(text: str) -> bool:
    """A short list item that only makes sense after its lead-in ("Fever", "Dry cough")."""
    words = text.split()
    if not words or len(words) > _MAX_FRAGMENT_WORDS or text[-1] in ".!?;":
        return False
    first = _word(words[0])
    return not (first in _AUX or first in _THIRD_PERSON)


def _is_title(text: str) -> bool:
    """An unpunctuated short line with no auxiliary or finite verb: a heading."""
    if text[-1] in ".!?" or _words(text) > _MAX_TITLE_WORDS:
        return False
    tokens = _tokens(text)
    return not any(
        t.word in _AUX or (_verb_class(t.word) in ("third", "past")
                           and (i + 1 == len(tokens) or tokens[i + 1].word != "of"))
        for i, t in enumerate(tokens)
    )


def _join_lead(lead: str, item: str) -> str:
    first = item.split(maxsplit=1)[0]
    if len(first) > 1 and first.isalpha() and first[0].isupper() and first[1:].islower():
        item = item[0].lower() + item[1:]
    return _sentence(f"{lead} {item}")


def _sentence(text: str) -> str:
    text = tidy(text).rstrip(",;:")
    if text and text[-1] not in ".!?":
        text += "."
    return text[:1].upper() + text[1:]


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


# --------------------------------------------------------------------------- decomposers


@dataclass(frozen=True, slots=True)
class _Draft:
    text: str
    markers: list[str]
    segment: Segment


def _numbered(drafts: Sequence[_Draft], decomposer: str) -> list[Claim]:
    return [
        Claim(id=f"c{i}", text=d.text, markers=d.markers, sentence=d.segment.index,
              span=Span(start=d.segment.start, end=d.segment.end), decomposer=decomposer)
        for i, d in enumerate(drafts, start=1)
    ]


class RuleDecomposer:
    """Offline decomposition by rules: see the module docstring and docs/decompose.md."""

    name = "rules"
    prompt_version: str | None = None

    def __init__(self, split_coordinated: bool = True) -> None:
        self.split_coordinated = split_coordinated

    async def decompose(self, answer: Answer) -> list[Claim]:
        return self.decompose_text(answer.text)

    def decompose_text(self, text: str) -> list[Claim]:
        """Claims of a plain text (synchronous; the same as :meth:`decompose`)."""
        drafts = [d for seg in segment(text) for d in self._drafts(seg)]
        return _numbered(drafts, self.name)

    def _drafts(self, seg: Segment) -> list[_Draft]:
        if seg.kind == "heading":
            return []
        text, markers = clean_text(seg.text)
        if is_droppable(text):
            return []
        if seg.kind == "item" and seg.lead and _is_fragment(text):
            return [_Draft(_join_lead(seg.lead, text), markers, seg)]
        if _words(text) < _MIN_CLAIM_WORDS or (seg.kind == "sentence" and _is_title(text)):
            return []
        return self._clauses(seg, text, markers)

    def _clauses(self, seg: Segment, text: str, markers: list[str]) -> list[_Draft]:
        if not self.split_coordinated:
            return [_Draft(text, markers, seg)]
        parts = [p for clause in split_semicolons(seg.text) for p in split_coordination(clause)]
        if len(parts) == 1:
            return [_Draft(text, markers, seg)]
        drafts = []
        for part in parts:
            part_text, part_markers = clean_text(part)
            if _words(part_text) >= 2:
                drafts.append(_Draft(_sentence(part_text), part_markers or markers, seg))
        return drafts


class _ReplyClaim(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: str
    sentence: int
    markers: list[str | int] = []


class _Reply(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    claims: list[_ReplyClaim]




def parse_reply(raw: str) -> list[_ReplyClaim]:
    """Parse the model's JSON reply strictly (a ```json fence is tolerated)."""
    data = load_json_reply(raw, "decomposer reply")
    try:
        return _Reply.model_validate(data).claims
    except ValidationError as exc:
        raise ParseError("decomposer reply has an unexpected structure: "
                         f"{validation_detail(exc)}", raw=raw) from None


def _one_line(text: str) -> str:
    return " ".join(text.split())


class LLMDecomposer:
    """Decomposition by a chat model, with spans from our own segmentation.

    The answer's segments are sent numbered ``[S<index>]`` inside a fence, in chunks of
    ``chunk_size`` segments (run concurrently), each with the ``context`` segments before
    it for resolving pronouns. A claim pointing at a segment outside its chunk is dropped
    with a warning; a reply whose claims all point outside it raises :class:`ParseError`.
    """

    name = "llm"
    stage = "decompose"

    def __init__(self, model: Model, *, version: str = "v1", chunk_size: int = 40,
                 context: int = 2, max_tokens: int | None = None) -> None:
        if chunk_size < 1 or context < 0:
            raise ConfigError("chunk_size must be >= 1 and context >= 0")
        self.model = model
        self.prompt = load_prompt(self.stage, version)
        self.chunk_size = chunk_size
        self.context = context
        self.max_tokens = max_tokens

    @property
    def prompt_version(self) -> str:
        return self.prompt.id

    async def decompose(self, answer: Answer) -> list[Claim]:
        segments = segment(answer.text)
        if not segments:
            return []
        starts = range(0, len(segments), self.chunk_size)
        chunks = [segments[s: s + self.chunk_size] for s in starts]
        contexts = [segments[max(0, s - self.context): s] for s in starts]
        replies = await asyncio.gather(*(
            self._decompose_chunk(answer.question, chunk, ctx)
            for chunk, ctx in zip(chunks, contexts, strict=True)))
        return _numbered([d for drafts in replies for d in drafts], self.name)

    async def _decompose_chunk(self, question: str | None, chunk: Sequence[Segment],
                               context: Sequence[Segment]) -> list[_Draft]:
        messages = self.prompt.render(
            question=defuse(_one_line(question or "(no question given)")),
            context=self._context_block(context),
            sentences="\n".join(f"[S{s.index}] {defuse(_one_line(s.text))}" for s in chunk),
        )
        completion = await self.model.complete(messages, stage=self.stage, temperature=0.0,
                                               max_tokens=self.max_tokens, json_mode=True)
        if completion.finish_reason == "length":
            raise ParseError("decomposer reply was cut off (finish_reason=length); raise "
                             "max_tokens or lower chunk_size", raw=completion.text)
        return self._drafts(parse_reply(completion.text), chunk, completion.text)

    @staticmethod
    def _context_block(context: Sequence[Segment]) -> str:
        if not context:
            return "(no preceding sentences)"
        return "\n".join(f"[S{s.index}] {defuse(_one_line(s.text))}" for s in context)

    def _drafts(self, claims: Sequence[_ReplyClaim], chunk: Sequence[Segment],
                raw: str) -> list[_Draft]:
        by_index = {s.index: s for s in chunk}
        drafts = [d for c in claims if (d := _llm_draft(c, by_index)) is not None]
        if claims and not drafts:
            raise ParseError("no claim in the decomposer reply points at a sentence it was "
                             f"given (S{chunk[0].index}-S{chunk[-1].index})", raw=raw)
        return drafts


def _llm_draft(claim: _ReplyClaim, by_index: dict[int, Segment]) -> _Draft | None:
    seg = by_index.get(claim.sentence)
    text, text_markers = strip_markers(claim.text)
    if seg is None or not text:
        log.warning("decompose: dropped claim %r (sentence %d is not in this chunk or the "
                    "text is empty)", claim.text[:80], claim.sentence)
        return None
    given = unique(m for raw in claim.markers for m in normalize_marker(str(raw)))
    segment_markers = strip_markers(seg.text)[1]
    kept = [m for m in unique([*given, *text_markers]) if m in segment_markers]
    return _Draft(text, kept or segment_markers, seg)


# --------------------------------------------------------------------------- registry


def _make_rules(model: Model | None = None) -> Decomposer:
    return RuleDecomposer()


def _make_llm(model: Model | None = None) -> Decomposer:
    if model is None:
        raise ConfigError("the 'llm' decomposer needs a model: pass --model (e.g. "
                          "openai:gpt-4o-mini) or choose --decomposer rules")
    return LLMDecomposer(model)


DECOMPOSERS: Registry[Decomposer] = Registry("decomposer")
DECOMPOSERS.register("rules", _make_rules)
DECOMPOSERS.register("llm", _make_llm)


def make_decomposer(name: str, model: Model | None = None) -> Decomposer:
    """The decomposer registered as ``name`` ("rules" or "llm"); ConfigError for an unknown
    name or for "llm" without a model."""
    return DECOMPOSERS.create(name, model=model)
