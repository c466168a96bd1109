"""Segmentation of an answer into sentences, list items and headings (:func:`segment`),
and the cleaning of a segment's raw text into claim text (:func:`clean_text`).

Lines are grouped into paragraph, list-item and heading blocks; paragraphs and items are
split into sentences by :func:`medverify.text.sentence_spans`. Every segment's offsets
index the answer text exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from medverify.citations import strip_markers, tidy
from medverify.records import Claim, Span
from medverify.text import sentence_spans

SegmentKind = Literal["sentence", "item", "heading"]


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


_LIST_MARK = re.compile(r"[ \t]*(?:[-*+•▪‣◦·–]|\d{1,3}[.)]|[a-z][.)]|\(\d{1,3}\)|\([a-z]\))[ \t]+")
_QUOTE_MARK = re.compile(r"[ \t]*(?:>[ \t]?)+")
_HEADING_MARK = re.compile(r"[ \t]*#{1,6}[ \t]+")
_BOLD_LINE = re.compile(r"(\*\*|__)[^.!?\n]{1,200}?\1[ \t]*:?[ \t]*")
_ALNUM = re.compile(r"[^\W_]")
_TERMINAL = ".!?:;"
_EMPHASIS = re.compile(r"\*\*|__|`|(?<![\w*])\*(?=\S)|(?<=\S)\*(?![\w*])")


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
    while start < end and text[start].isspace():
        start += 1
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
    return sentence_spans(text, block.start, block.end)


# --------------------------------------------------------------------------- claim text

def clean_text(raw: str) -> tuple[str, list[str]]:
    """Claim text of a raw segment (markers, links and markdown emphasis removed, whitespace
    tidied) and the segment's marker labels."""
    text, markers = strip_markers(raw)
    if "*" in text or "_" in text or "`" in text:
        text = tidy(_EMPHASIS.sub("", text))
    return text, markers


def _clean(raw: str) -> str:
    return clean_text(raw)[0]


@dataclass(frozen=True, slots=True)
class _Draft:
    """A claim's text and markers, with the segment it comes from (before numbering)."""

    text: str
    markers: list[str]
    segment: Segment
    original: str | None = None  # the answer's words, when ``text`` differs from them


def _numbered(drafts: Sequence[_Draft], decomposer: str) -> list[Claim]:
    return [
        Claim(id=f"c{i}", text=d.text, markers=d.markers, sentence=d.segment.index,
              span=Span(start=d.segment.start, end=d.segment.end), decomposer=decomposer,
              original=d.original)
        for i, d in enumerate(drafts, start=1)
    ]
