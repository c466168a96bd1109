"""Evidence a judge cannot invent: passage labels and quotes checked against what it saw.

A judge that says a claim is supported (or contradicted) must name a passage that was shown
to it and copy words from that passage. This module holds the two checks every judge shares:

- :func:`resolve_passage` maps the label a model wrote (``"P2"``, ``"[p2]"``) to a passage it
  was shown; a label it was not shown raises :class:`UnknownPassage` (the caller turns that
  into an ``ERROR`` claim, never a verdict);
- :func:`quote_in_text` says whether a quote really is in a passage: case, whitespace,
  typographic quotes and dashes are normalised, an ellipsis may join pieces that appear in
  order, and a quote of fewer than :data:`MIN_QUOTE_WORDS` words counts as no quote (a single
  word is found in almost any passage and proves nothing) unless it is the whole passage.

:func:`verify_analysis` applies the rule documented in ``docs/judges.md``: an analysis that
holds counts only when its quote is found in the passage it names; otherwise it is kept for
the record with ``verified=False`` and does not count towards the category.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from medverify.records import Analysis, Passage

MIN_QUOTE_WORDS = 3

_NULL_LABELS = {"", "null", "none", "n/a", "na", "-"}
_LABEL = re.compile(r"^[\[\(\s]*(?:passage\s*)?([A-Za-z]?)\s*(\d+)[\]\)\s.]*$", re.IGNORECASE)
_TRANSLATE = str.maketrans(
    {
        "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'",
        "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u00ab": '"', "\u00bb": '"',
        "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-",
        "\u2212": "-", "\u00a0": " ", "\u202f": " ", "\u2009": " ",
    }
)
_ELLIPSIS = re.compile(r"\s*(?:\.\s*\.\s*\.|\u2026|\[\s*\.\.\.\s*\])\s*")
_WORD = re.compile(r"\w+")
_EDGE = " .,;:\"'()[]"


class UnknownPassage(ValueError):
    """The judge named a passage that was not shown to it."""


def resolve_passage(label: object, passages: Mapping[str, Passage]) -> Passage | None:
    """The shown passage a model's label refers to; None for an absent/null label.

    Raises :class:`UnknownPassage` for a label that names no shown passage (including a
    label that is not a string)."""
    if label is None:
        return None
    if not isinstance(label, str):
        raise UnknownPassage(f"passage label must be a string or null, got {label!r}")
    text = label.strip()
    if text.casefold() in _NULL_LABELS:
        return None
    if text in passages:
        return passages[text]
    match = _LABEL.match(text)
    if match:
        wanted = f"{match.group(1) or 'P'}{match.group(2)}".upper()
        for key, passage in passages.items():
            if key.upper() == wanted:
                return passage
    shown = ", ".join(list(passages)[:12])
    raise UnknownPassage(
        f"cites passage {text[:40]!r}, which was not shown to the judge (shown: {shown})"
    )


def normalise(text: str) -> str:
    """Text folded for quote matching: case, whitespace, typographic quotes and dashes."""
    return " ".join(text.translate(_TRANSLATE).split()).casefold()


def quote_in_text(quote: str, text: str) -> bool:
    """Whether ``quote`` is copied from ``text`` (normalised; ``...`` joins ordered pieces)."""
    pieces = [normalise(p).strip(_EDGE) for p in _ELLIPSIS.split(quote)]
    pieces = [p for p in pieces if p]
    if not pieces:
        return False
    haystack = normalise(text)
    words = sum(len(_WORD.findall(p)) for p in pieces)
    if words < MIN_QUOTE_WORDS and normalise(text).strip(_EDGE) != " ".join(pieces):
        return False
    start = 0
    for piece in pieces:
        found = haystack.find(piece, start)
        if found < 0:
            return False
        start = found + len(piece)
    return True


def quote_in_passage(quote: str, passage: Passage) -> bool:
    """Whether ``quote`` is copied from ``passage`` (see :func:`quote_in_text`)."""
    return quote_in_text(quote, passage.text)


def verify_analysis(analysis: Analysis, passage: Passage | None) -> Analysis:
    """The analysis with ``quote_found`` and ``verified`` set against its named passage.

    ``verified`` is only decided for an analysis that holds: True when a passage is named
    and the quote is found in it, False otherwise (then it does not count, see
    :attr:`Analysis.counts`)."""
    found = quote_in_passage(analysis.quote, passage) if analysis.quote and passage else None
    if analysis.quote and passage is None:
        found = False
    verified = bool(found) if analysis.holds else None
    return analysis.model_copy(update={"quote_found": found, "verified": verified})

