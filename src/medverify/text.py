"""Sentence splitting (every splitter medverify uses, in one place) and printable names.

The callers want different things from "a sentence", so there is one named variant per
need rather than one splitter with many switches. None of them changes its input; offsets
index the string passed in.

=========================  ===============================================  ===================
function                   boundary                                         used by
=========================  ===============================================  ===================
:func:`sentence_spans`     ``. ! ? …`` (plus closing quotes and citation    claim segmenter
                           brackets) before whitespace and a non-lower-     (``decompose``)
                           case word; not after abbreviations, initials,
                           "No. 5"-style labels
:func:`sentence_breaks`    ``. ! ?`` (plus closing quotes) and whitespace,  KB chunking
                           a blank line, a newline before a bullet
:func:`line_sentences`     runs of ``. ! ?`` and line ends                  built-in judge
:func:`clause_spans`       whitespace after ``. ! ? ;``, and newlines       verifier windows
:func:`flat_sentences`     whitespace after ``. ! ?`` before a capital or   synthetic citers
                           digit, on whitespace-collapsed text
=========================  ===============================================  ===================

Names that come from outside (file names, document titles and ids, URLs) are shown
through :func:`printable` (control characters, line and paragraph separators, bidi
overrides and lone surrogates written as ``\\n``, ``\\x1b``, ``\\u202e``: a name can
neither forge an output line nor reach the terminal as an escape sequence) or stored
through :func:`one_line` (a title: its line breaks become spaces, the rest as printable).

This is a bottom-layer module: it imports nothing from medverify but :mod:`medverify.errors`.
"""

from __future__ import annotations

import re

__all__ = [
    "UNSAFE",
    "clause_spans",
    "flat_sentences",
    "line_sentences",
    "one_line",
    "printable",
    "sentence_breaks",
    "sentence_spans",
]

# --------------------------------------------------------------------------- sentence_spans

_SENTENCE_END = re.compile(
    r"[.!?…]+[\"'”’)\]*_]*(?:\s{0,3}\[\s*\^?\d{1,4}(?:\s*[-–,;]\s*\^?\d{1,4}){0,20}\s*\])*(?=\s|$)"
)
_WORD_BEFORE = re.compile(r"(\S{1,40})$")
_NEXT_WORD = re.compile(r"\S+\s+(\w+)")
_NEVER_SPLIT_AFTER = frozenset({
    "e.g", "i.e", "eg", "ie", "vs", "viz", "cf", "approx", "ca", "resp", "incl", "dr", "drs",
    "mr", "mrs", "ms", "prof", "st", "sr",
})
# Place abbreviations end a sentence only when a typical sentence opener follows.
_PLACE_ABBREVIATIONS = frozenset({"u.s", "u.k", "u.n", "e.u", "u.s.a"})
_SENTENCE_OPENERS = frozenset({
    "the", "this", "these", "that", "those", "it", "its", "he", "she", "they", "we", "you",
    "i", "in", "a", "an", "however", "there", "for", "as", "at", "on", "if", "when", "some",
    "most", "many", "patients", "people", "his", "her", "their", "our",
})
_NO_SPLIT_BEFORE_NUMBER = frozenset({
    "no", "nos", "fig", "figs", "p", "pp", "vol", "ref", "refs", "eq", "tab", "ch", "sec",
    "art", "n", "al", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct",
    "nov", "dec",
})
_LETTER_NOUNS = frozenset({
    "vitamin", "hepatitis", "type", "group", "class", "grade", "stage", "phase", "factor",
    "protein", "influenza", "complex", "category", "schedule", "part", "plan", "cluster",
})


def sentence_spans(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Spans of the prose sentences of ``text[start:end]``, in order (linear time).

    A sentence ends at ``. ! ?`` or ``…`` (with any closing quotes, brackets, emphasis and
    ``[1]``-style citation markers after it) followed by whitespace, when the next word
    does not start in lower case and the period does not follow an abbreviation ("e.g.",
    "Dr."), an initial ("John F. Kennedy", but "vitamin D." ends), a label before a number
    ("No. 5", "Fig. 2") or a place abbreviation ("U.S.") not followed by a typical sentence
    opener. Decimals ("2.5 mg") never split: the period must precede whitespace.

    Each span after the first begins past the whitespace that ended the one before and
    ends at its punctuation; the last ends at ``end``. Characters outside the range are
    read as context (the word before an initial, the word after "U.S.") but never split.
    """
    end = len(text) if end is None else end
    spans = []
    begin = start
    for match in _SENTENCE_END.finditer(text, start, end):
        after = _skip_space(text, match.end(), end)
        if after >= end or not _is_boundary(text, begin, match, after):
            continue
        spans.append((begin, match.end()))
        begin = after
    if begin < end:
        spans.append((begin, end))
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
    following = _NEXT_WORD.match(text, word_start, word_start + 80)
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


# --------------------------------------------------------------------------- simple variants

_BREAK = re.compile(r"(?:[.!?][\"')\]]*\s+|\n\s*\n|\n(?=\s*[-*\u2022]\s))")
_LINE_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|$)")
_CLAUSE_END = re.compile(r"(?<=[.!?;])\s+|\n+")
_FLAT_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")


def sentence_breaks(text: str) -> list[int]:
    """Offsets where a new sentence may begin, in order: just past ``. ! ?`` with any
    closing quotes or brackets and the whitespace after them, past a blank line, and just
    past a newline that precedes a bullet line (``-``, ``*`` or ``•``). No abbreviation
    handling: "e.g. " is a break too. Chunking only needs likely places to cut."""
    return [m.end() for m in _BREAK.finditer(text)]


def line_sentences(text: str) -> list[str]:
    """Sentences as verbatim slices of ``text``, stripped, empties dropped: each ends at a
    run of ``. ! ?`` or at the end of the text (a final newline allowed).

    An unpunctuated line that is followed by another line is left out (only the last line
    of a text may lack end punctuation): ``"a\\nb."`` gives ``["b."]``.
    """
    return [m.group(0).strip() for m in _LINE_SENTENCE.finditer(text) if m.group(0).strip()]


def clause_spans(text: str) -> list[tuple[int, int]]:
    """Spans of the pieces of ``text`` between separators, in order: whitespace after
    ``. ! ?`` or ``;``, and runs of newlines. Pieces that are empty or only whitespace are
    dropped; a span does not include its separator (leading whitespace of the text stays)."""
    spans: list[tuple[int, int]] = []
    start = 0
    for match in _CLAUSE_END.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, len(text)))
    return [span for span in spans if text[span[0] : span[1]].strip()]


def flat_sentences(text: str) -> list[str]:
    """Sentences of ``text`` with its whitespace collapsed to single spaces: split after
    ``. ! ?`` where a capital letter or digit follows. Not slices of ``text``."""
    return [s.strip() for s in _FLAT_END.split(" ".join(text.split())) if s.strip()]


# ------------------------------------------------------------------------ printable names

UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
    "\ud800-\udfff]")
"""Characters a name must not carry to a terminal or a line-based output: C0 and C1
controls (newline, carriage return, ESC ...) and DEL, the Unicode line and paragraph
separators, the bidirectional formatting characters (which reorder what is displayed), and
lone surrogates (a file name's undecodable bytes, which no UTF-8 output can write)."""

_BREAKS = re.compile("[\t\n\v\f\r\x1c-\x1f\x85\u2028\u2029]+")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group(0)
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def printable(text: str) -> str:
    """``text`` with every :data:`UNSAFE` character written as a visible escape (``\\n``,
    ``\\r``, ``\\t``, ``\\x1b``, ``\\u202e``, ``\\udcff``); other text, backslashes
    included, unchanged. For display only: it is not reversible."""
    return UNSAFE.sub(_escaped, text) if UNSAFE.search(text) else text


def one_line(text: str) -> str:
    """A name to store as a title: runs of line breaks and other whitespace controls become
    one space, the remaining :data:`UNSAFE` characters are escaped as by :func:`printable`.
    A name without unsafe characters is returned unchanged."""
    if not UNSAFE.search(text):
        return text
    return printable(_BREAKS.sub(" ", text))
