"""The offline rule decomposer (:class:`RuleDecomposer`) and its English drop rules.

Segments (:func:`medverify.decompose.segment.segment`) that make no checkable claim are
dropped: questions, greetings and pleasantries, disclaimers and advice to consult a
professional, headings and list lead-ins. A short list item is joined to its lead-in;
other segments are split into clauses (:mod:`medverify.decompose.clauses`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from medverify.citations import tidy
from medverify.decompose.clauses import (
    _AUX,
    _THIRD_PERSON,
    _tokens,
    _verb_class,
    _word,
    _words,
    split_coordination,
    split_semicolons,
)
from medverify.decompose.segment import Segment, _Draft, _numbered, clean_text, segment
from medverify.decompose.subjects import resolve_subjects
from medverify.records import Answer, Claim

if TYPE_CHECKING:
    from medverify.config import Config
    from medverify.llm.facade import Model


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


class RuleDecomposer:
    """Offline decomposition by rules: see the module docstring and docs/decompose.md."""

    name = "rules"
    prompt_version: str | None = None

    def __init__(self, split_coordinated: bool = True, name_subjects: bool = True) -> None:
        self.split_coordinated = split_coordinated
        self.name_subjects = name_subjects

    @classmethod
    def from_config(cls, config: Config | None = None,
                    model: Model | None = None) -> RuleDecomposer:
        """The registry factory (``factory(config, model)``); needs neither."""
        return cls()

    async def decompose(self, answer: Answer) -> list[Claim]:
        return self.decompose_text(answer.text, answer.question)

    def decompose_text(self, text: str, question: str | None = None) -> list[Claim]:
        """Claims of a plain text (synchronous; the same as :meth:`decompose`). With
        ``name_subjects`` (the default) a claim without a subject takes it from the answer
        or the ``question`` (:mod:`medverify.decompose.subjects`)."""
        drafts = [d for seg in segment(text) for d in self._drafts(seg)]
        if self.name_subjects:
            drafts = with_subjects(drafts, question, text)
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


def with_subjects(drafts: Sequence[_Draft], question: str | None, text: str) -> list[_Draft]:
    """The drafts with their subjects named (:func:`resolve_subjects`); a rewritten draft
    keeps its sentence, markers removed, as ``original``."""
    named = resolve_subjects([d.text for d in drafts], question, text)
    return [d if new == d.text else replace(d, text=new, original=clean_text(d.segment.text)[0])
            for d, new in zip(drafts, named, strict=True)]
