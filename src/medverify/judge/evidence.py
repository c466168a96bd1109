"""Evidence a judge cannot invent: passage labels and quotes checked against what it saw.

A judge that says a claim is supported (or contradicted) must name a passage that was shown
to it and copy words from that passage that say so. This module holds the checks every judge
shares:

- :func:`resolve_passage` maps the label a model wrote (``"P2"``, ``"[p2]"``) to a passage it
  was shown; a label it was not shown raises :class:`UnknownPassage` (the caller turns that
  into an ``ERROR`` claim, never a verdict);
- :func:`quote_in_text` says whether a quote is copied from a text: both are normalised
  (:func:`normalise`), an ellipsis (``...``, ``…``, ``[...]``) may join pieces that appear in
  that order, every piece must match on word boundaries (never inside a word, a number or a
  hyphenated word), and every piece must be a real span (:func:`shape_problem`);
- :func:`check_quote` is the stricter rule for a quote to count as evidence: copied as
  above, not a fragment whose cut drops a negation or modal word that governs it, an
  ellipsis that skips no such word and stays inside one sentence, and (given the claim)
  covering the claim's key content (:func:`content_problem`).

:func:`verify_analysis` applies the rule documented in ``docs/judges.md`` ("Evidence the
judge cannot invent"): an analysis that holds counts only when its quote passes
:func:`check_quote` against the passage it names; otherwise it is kept for the record with
``verified=False`` and ``quote_problem`` saying why, and does not count.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import replace
from functools import lru_cache
from itertools import pairwise

from medverify.records import Analysis, Passage
from medverify.terms import (
    STOPWORDS,
    KeyTerms,
    coverage,
    covered_items,
    cue,
    fold,
    key_items,
    key_terms,
    number_value,
    subject,
    tokens,
)

MIN_QUOTE_WORDS = 3
"""Words the longest piece of a quote must have (pieces are never summed)."""
MIN_SINGLE_WORD_LETTERS = 4
"""Letters a one-word piece (after an ellipsis) must have; it must not be a stopword."""
MAX_QUOTE_PIECES = 4
"""Pieces an ellipsis may join in one quote."""
SUPPORT_SHARE = 0.5
"""Weighted share of the claim's key content (:func:`medverify.terms.coverage`) a
supporting quote must have, besides every number of the claim."""
CONTRADICT_SHARE = 0.3
"""Weighted share of the claim's key content, numbers left out, a contradicting quote must
have (its numbers may differ from the claim's: that can be the contradiction)."""
DIRECTIONS = ("supported", "contradicted")

_NULL_LABELS = {"", "null", "none", "n/a", "na", "-"}
_LABEL = re.compile(r"^[\[\(\s]*(?:passage\s*)?([A-Za-z]?)\s*(\d+)[\]\)\s.]*$", re.IGNORECASE)
_FENCE_MARKS = re.compile(r"<{2,}|>{2,}")
_FENCE_NAME = re.compile(r"^F[0-9a-f]{3,}\s+", re.IGNORECASE)
_TRANSLATE = str.maketrans(
    {
        "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'",
        "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u00ab": '"', "\u00bb": '"',
        "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-",
        "\u2212": "-", "\u00a0": " ", "\u202f": " ", "\u2009": " ",
    }
)
_ELLIPSIS = re.compile(
    r"\s*(?:\.\s*\.\s*\.|\u2026|\[\s*(?:\.\s*){3}\]|\(\s*(?:\.\s*){3}\))\s*"
)
_EDGE = " .,;:!?\"'()[]-"
_JOINERS = "-'"  # inside a word when a letter or digit is on both sides
_NUMBER_JOINERS = ".,"  # inside a number when a digit is on both sides
_CLAUSE_END = re.compile(r"[.!?;:](?=\s|$)")
_SENTENCE_END = re.compile(r"[.!?;](?=\s|$)")
_MAX_PLACES = 64


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
    header = _from_header(text, passages)
    if header is not None:
        return header
    shown = ", ".join(list(passages)[:12])
    raise UnknownPassage(
        f"cites passage {text[:40]!r}, which was not shown to the judge (shown: {shown})"
    )


def _from_header(text: str, passages: Mapping[str, Passage]) -> Passage | None:
    """The passage a label copied from its fence header names (``<<<F3a9 P1 | title: X |
    doc: d1``, ``P1 | title: X``), or None. The part before the first ``|`` (fence marks and
    fence name dropped) must name exactly one shown label and nothing else; a ``title:`` or
    ``doc:`` field must agree with that passage (a prefix of it: the copy may be cut)."""
    head, *fields = _FENCE_MARKS.sub(" ", text).split("|")
    head = _FENCE_NAME.sub("", head.strip())
    match = _LABEL.match(head)
    if not match:
        return None
    wanted = f"{match.group(1) or 'P'}{match.group(2)}".upper()
    found = [p for key, p in passages.items() if key.upper() == wanted]
    if len(found) != 1:
        return None
    for name, value in (f.split(":", 1) for f in fields if ":" in f):
        shown = {"title": found[0].title, "doc": found[0].doc_id}.get(name.strip().casefold())
        value = normalise(value)
        if value and shown is not None and not normalise(shown).startswith(value):
            return None
    return found[0]


@lru_cache(maxsize=512)
def normalise(text: str) -> str:
    """Text folded for quote matching: Unicode compatibility forms (NFKC: full-width
    letters, ligatures), invisible format characters (zero-width spaces, soft hyphens,
    direction marks) removed, typographic quotes and dashes, whitespace and case.
    Look-alike letters of other scripts are *not* folded: they do not match.

    Cached (a passage is normalised for :func:`quote_in_text` and again for
    :func:`check_quote`). ASCII text takes a fast path with the same result: NFKC leaves
    ASCII as it is, no ASCII character is a format character (Cf) or in the typographic
    table, so only whitespace and case fold (:func:`_normalise_unicode` is the full path;
    a test checks both agree)."""
    if text.isascii():
        return " ".join(text.split()).casefold()
    return _normalise_unicode(text)


def _normalise_unicode(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")
    return " ".join(text.translate(_TRANSLATE).split()).casefold()


def quote_pieces(quote: str) -> list[str]:
    """The normalised pieces of a quote: split at ellipses, edge punctuation stripped,
    empty pieces dropped."""
    pieces = (p.strip(_EDGE) for p in _ELLIPSIS.split(normalise(quote)))
    return [p for p in pieces if p]


def _is_real_piece(words: list[str]) -> bool:
    content = [w for w in words if not w[:1].isdigit() and len(w) > 1
               and w not in STOPWORDS and cue(w) is None]
    if len(words) >= 2:
        return bool(content)
    return len(content) == 1 and len(content[0]) >= MIN_SINGLE_WORD_LETTERS


def shape_problem(pieces: list[str]) -> str | None:
    """Why normalised quote pieces are not a real span (None when they are).

    The rule: at most :data:`MAX_QUOTE_PIECES` pieces; the longest has at least
    :data:`MIN_QUOTE_WORDS` words; every piece is either two or more words of which one
    is a content word (not a stopword, a negation or modal, a number or a single letter),
    or one content word of at least :data:`MIN_SINGLE_WORD_LETTERS` letters.
    A lone number, a single letter and a run of stopwords are never pieces. Words are
    :func:`medverify.terms.tokens` ("first-line", "1.5" are one word each)."""
    if not pieces:
        return "the quote is empty"
    if len(pieces) > MAX_QUOTE_PIECES:
        return (f"the quote is stitched from {len(pieces)} pieces (at most "
                f"{MAX_QUOTE_PIECES} are allowed)")
    words = [tokens(p) for p in pieces]
    longest = max(range(len(pieces)), key=lambda i: len(words[i]))
    if len(words[longest]) < MIN_QUOTE_WORDS:
        return (f"the quote's longest piece has {len(words[longest])} word(s); at least "
                f"{MIN_QUOTE_WORDS} are needed")
    for i, piece in enumerate(pieces):
        if not _is_real_piece(words[i]):
            return (f"the piece {_show(piece)} is not a real span (a single letter, a short "
                    "word, a lone number or only common words)")
    return None


def _show(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _wordy(char: str) -> bool:
    return char.isalnum() or char == "_"


def cuts_word(text: str, at: int) -> bool:
    """Whether a boundary at index ``at`` of ``text`` falls inside a word: between two
    letters or digits, at a hyphen or apostrophe inside a word ("non-|steroidal",
    "non|-steroidal", "isn|'t"), or at a decimal point or comma inside a number ("1.|5")."""
    if at <= 0 or at >= len(text):
        return False
    left, right = text[at - 1], text[at]
    if _wordy(left) and _wordy(right):
        return True
    for joiner, before, after in ((left, text[at - 2] if at >= 2 else "", right),
                                  (right, left, text[at + 1] if at + 1 < len(text) else "")):
        if joiner in _JOINERS and _wordy(before) and _wordy(after):
            return True
        if joiner in _NUMBER_JOINERS and before.isdigit() and after.isdigit():
            return True
    return False


def _occurrences(haystack: str, piece: str, start: int = 0) -> Iterator[int]:
    """Where ``piece`` starts in ``haystack`` at or after ``start``, on word boundaries."""
    found = haystack.find(piece, start)
    while found >= 0:
        if not cuts_word(haystack, found) and not cuts_word(haystack, found + len(piece)):
            yield found
        found = haystack.find(piece, found + 1)


def placements(pieces: list[str], haystack: str) -> list[list[tuple[int, int]]]:
    """Ways the pieces sit in ``haystack`` in order, on word boundaries: one per place of the
    first piece (the later pieces at their earliest places after it), at most 64."""
    out: list[list[tuple[int, int]]] = []
    for first in _occurrences(haystack, pieces[0]):
        spans = [(first, first + len(pieces[0]))]
        for piece in pieces[1:]:
            at = next(_occurrences(haystack, piece, spans[-1][1]), -1)
            if at < 0:
                return out  # a later first place cannot fit the rest either
            spans.append((at, at + len(piece)))
        out.append(spans)
        if len(out) >= _MAX_PLACES:
            break
    return out


def _whole(pieces: list[str], haystack: str) -> bool:
    return len(pieces) == 1 and pieces[0] == haystack.strip(_EDGE)


def quote_in_text(quote: str, text: str) -> bool:
    """Whether ``quote`` is copied from ``text``: normalised, every piece a real span
    (:func:`shape_problem`; a quote of the whole text is always one) found on word
    boundaries, the pieces in order. Says nothing about what the quote means: see
    :func:`check_quote` for when it counts as evidence."""
    pieces = quote_pieces(quote)
    haystack = normalise(text)
    if not pieces:
        return False
    if not _whole(pieces, haystack) and shape_problem(pieces):
        return False
    return bool(placements(pieces, haystack))


def _cue_words(words: list[str]) -> list[str]:
    return [w for w in words if cue(w)]


def _before_problem(haystack: str, start: int) -> str | None:
    """A negation or modal earlier in the clause the quote starts in (commas do not end a
    clause: "not, as many believe, a cure")."""
    ends = [m.end() for m in _CLAUSE_END.finditer(haystack, 0, start)]
    before = tokens(haystack[ends[-1] if ends else 0:start])
    cues = [i for i, w in enumerate(before) if cue(w)]
    if not cues:
        return None
    tail = before[cues[0]:]
    shown = " ".join(tail if len(tail) <= 6 else [*tail[:2], "...", *tail[-3:]])
    where = "just after" if len(tail) <= 3 else "after"
    return f"the quote is cut {where} '{shown}', which governs it"


def _after_problem(haystack: str, end: int) -> str | None:
    """A negation right after the quote's end, with nothing but a space between."""
    rest = haystack[end:]
    match = re.match(r" ?(\w+(?:'\w+)?)", rest)
    if match and cue(match.group(1)) == "negation":
        return f"the quote ends just before '{match.group(1)}', which belongs to it"
    return None


def _gap_problem(haystack: str, spans: list[tuple[int, int]]) -> str | None:
    for (_, prev_end), (start, _) in pairwise(spans):
        gap = haystack[prev_end:start]
        if _SENTENCE_END.search(gap + " "):
            return "the ellipsis joins pieces of different sentences"
        skipped = _cue_words(tokens(gap))
        if skipped:
            return f"the ellipsis skips '{' '.join(skipped)}', which changes what it says"
    return None


def placement_problem(haystack: str, spans: list[tuple[int, int]]) -> str | None:
    """Why pieces placed at ``spans`` of the normalised passage do not count (None: they
    do): an ellipsis across sentences or skipping a negation/modal, a first piece cut after
    a negation/modal of its clause, a last piece cut just before a negation."""
    return (_gap_problem(haystack, spans) or _before_problem(haystack, spans[0][0])
            or _after_problem(haystack, spans[-1][1]))


def _not_found(pieces: list[str], haystack: str) -> str:
    for piece in pieces:
        if next(_occurrences(haystack, piece), None) is None:
            if piece in haystack:
                return f"the piece {_show(piece)} is only found inside longer words"
            return f"the piece {_show(piece)} is not in it"
    return "the quote's pieces are not in the passage's order"


_POSSESSIVE = re.compile(r"['\u2019]s\b")


def _quote_terms(quote: str) -> KeyTerms:
    """Every word of the quote (folded) and its numbers, as :class:`KeyTerms` for
    :func:`coverage`: a quote's words are matched whatever their case or place."""
    toks = tokens(_POSSESSIVE.sub("", " ".join(quote_pieces(quote))))
    numbers = frozenset(number_value(t) for t in toks if t[:1].isdigit())
    words = frozenset(fold(t) for t in toks if not t[:1].isdigit())
    return KeyTerms(numbers=numbers, names=frozenset(), words=words, negated=False,
                    hedged=False)


def _anchors(text: str) -> list[str]:
    """What a text is about, folded: its leading name (:func:`subject`) and its names."""
    lead = subject(text)
    names = sorted(fold(n) for n in key_terms(text).names)
    return ([lead] if lead else []) + [n for n in names if n != lead]


def _name_problem(claim: str, quote: str, have: KeyTerms, supporting: bool) -> str | None:
    """A supporting quote must mention every name of the claim (a capitalised word inside
    it: "MMR", "Reye"); no quote may be about another subject or name while leaving out the
    claim's ("Insulin treats ..." for "Metformin cures ...")."""
    anchors = _anchors(claim)
    missing = [n for n in anchors if n not in have.words]
    names = {fold(n) for n in key_terms(claim).names}
    if supporting and any(n in names for n in missing):
        shown = [n for n in missing if n in names]
        return f"the quote does not mention {_listed(shown)}, which the claim names"
    claim_words = {fold(t.casefold()) for t in tokens(claim)}
    other = [n for n in _anchors(quote) if n not in claim_words]
    if missing and other:
        return f"the quote is about {_listed(other)}, not {_listed(missing)}"
    return None


def content_problem(quote: str, claim: str, direction: str = "supported") -> str | None:
    """Why ``quote`` does not cover the key content of ``claim`` (None when it does).

    Both directions: the quote is not about another subject (a capitalised first word or a
    name the claim does not have, :func:`medverify.terms.subject`) while leaving out
    the claim's subject or a name of it. Supporting: the quote mentions every name of the
    claim, has at least :data:`SUPPORT_SHARE` of its weighted key content
    (:func:`medverify.terms.coverage`) and every number of it. Contradicting: at least
    :data:`CONTRADICT_SHARE` of the key content with the numbers left out (a different
    number can be the contradiction). A claim without key content sets no share."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    claim = _POSSESSIVE.sub("", unicodedata.normalize("NFKC", claim))
    wanted, have = key_terms(claim), _quote_terms(quote)
    supporting = direction == "supported"
    if not supporting:
        wanted = replace(wanted, numbers=frozenset())
    named = _name_problem(claim, _POSSESSIVE.sub("", unicodedata.normalize("NFKC", quote)),
                          have, supporting)
    if named:
        return named
    share = SUPPORT_SHARE if supporting else CONTRADICT_SHARE
    got = coverage(wanted, have) if wanted else 1.0
    if got < share:
        found, total = len(covered_items(wanted, have)), len(key_items(wanted))
        return (f"the quote shares too little of the claim's content ({found} of {total} "
                f"key terms, weighted share {got:.2f} < {share:.2f})")
    numbers = sorted(wanted.numbers - have.numbers)
    if numbers:
        return f"the quote lacks the claim's number{'s' * (len(numbers) > 1)} {_listed(numbers)}"
    return None


def _listed(items: list[str]) -> str:
    return ", ".join(f"'{i}'" for i in items[:4]) + (", ..." if len(items) > 4 else "")


def check_quote(
    quote: str, passage_text: str, claim_text: str | None = None,
    direction: str = "supported",
) -> str | None:
    """Why ``quote`` does not count as evidence from ``passage_text`` that the claim is
    ``direction`` (``"supported"`` or ``"contradicted"``); None when it counts.

    In order: the shape of its pieces (:func:`shape_problem`); found on word boundaries
    in order (:func:`placements`); some placement free of cut negations and modals
    (:func:`placement_problem`); the claim's key content (:func:`content_problem`, only
    when ``claim_text`` is given)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    pieces = quote_pieces(quote)
    haystack = normalise(passage_text)
    problem = None if pieces and _whole(pieces, haystack) else shape_problem(pieces)
    if problem:
        return problem
    places = placements(pieces, haystack)
    if not places:
        return _not_found(pieces, haystack)
    problems = [placement_problem(haystack, spans) for spans in places]
    if all(problems):
        return problems[0]
    return content_problem(quote, claim_text, direction) if claim_text is not None else None


def quote_in_passage(quote: str, passage: Passage) -> bool:
    """Whether ``quote`` is copied from ``passage`` (see :func:`quote_in_text`)."""
    return quote_in_text(quote, passage.text)


def verify_analysis(
    analysis: Analysis, passage: Passage | None, claim: str | None = None,
    direction: str = "supported",
) -> Analysis:
    """The analysis with ``quote_found``, ``verified`` and ``quote_problem`` set.

    ``quote_found`` says whether the quote is copied from the named passage
    (:func:`quote_in_text`). ``verified`` is only decided for an analysis that holds: True
    when a passage is named and the quote counts (:func:`check_quote`, with the content
    rule when the ``claim`` text is given, for ``direction`` "supported" or
    "contradicted"), False otherwise, with ``quote_problem`` saying why (then it does not
    count, see :attr:`Analysis.counts`)."""
    quote = analysis.quote
    found = quote_in_passage(quote, passage) if quote and passage else None
    if quote and passage is None:
        found = False
    if not analysis.holds:
        return analysis.model_copy(update={"quote_found": found, "verified": None,
                                           "quote_problem": None})
    if passage is None:
        problem: str | None = "it named no passage, so its quote cannot be checked"
    elif not quote:
        problem = "it quoted nothing from it"
    else:
        problem = check_quote(quote, passage.text, claim, direction)
    return analysis.model_copy(update={"quote_found": found, "verified": problem is None,
                                       "quote_problem": problem})
