"""Citation markers in answer text: find them, normalise them, strip them from claims.

Recognised markers and their normalised labels:

- numeric brackets ``[1]``, ``[1, 2]``, ``[1-3]``, ``[1;4]`` -> ``"1"``, ``"2"``, ``"3"``...
  (a range expands to every number in it, up to :data:`MAX_RANGE` numbers);
- footnotes ``[^1]``, ``[^note]`` -> ``"1"``, ``"note"``;
- chat-browsing markers ``【3†source】`` -> ``"3"``;
- author-year parentheses ``(Smith et al., 2020)``, ``(Smith & Jones 2019; Lee, 2021)`` ->
  ``"Smith et al. 2020"``, ``"Smith & Jones 2019"``, ``"Lee 2021"``;
- markdown links: ``[2](https://...)`` -> ``"2"``; ``[text](https://x)`` keeps ``text`` in the
  sentence and yields the URL ``"https://x"``;
- bare URLs ``https://...`` and ``www....`` -> the URL itself (trailing punctuation excluded).

Markers link a claim to the answer's sources: a label matches a ``Source.id`` (numbers,
footnote names, author-year) or a ``Source.url`` (URLs). Every pattern here is linear-time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

MAX_RANGE = 50

_NUM_LIST = r"\^?\d{1,4}(?:\s*[-–—,;]\s*\^?\d{1,4}){0,20}"
_MD_LINK = r"\[(?P<anchor>[^\[\]\n]{1,300})\]\((?P<link>(?:https?://|www\.)[^()\s]{1,2000})\)"
_NUMERIC = rf"\[\s*(?P<nums>{_NUM_LIST})\s*\]"
_FOOTNOTE = r"\[\^(?P<foot>[\w.-]{1,30})\]"
_BROWSING = r"【(?P<browse>\d{1,4})(?:[†:][^】\n]{0,100})?】"
_AUTHOR = r"[A-Z][\w'’-]{1,40}(?:\s+(?:et\s+al\.?|(?:and|&)\s+[A-Z][\w'’-]{1,40}))?"
_AUTHOR_YEAR = rf"{_AUTHOR},?\s+(?:19|20)\d\d[a-z]?"
_PAREN_CITE = rf"\((?P<cites>{_AUTHOR_YEAR}(?:\s*;\s*{_AUTHOR_YEAR}){{0,10}})\)"
_URL = r"(?P<url>(?:https?://|www\.)[^\s<>\[\]()\"']{1,2000})"

MARKER_RE = re.compile("|".join((_MD_LINK, _NUMERIC, _FOOTNOTE, _BROWSING, _PAREN_CITE, _URL)))
_ONE_AUTHOR_YEAR = re.compile(_AUTHOR_YEAR)
_URL_TRAILING = ".,;:!?"
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?)\]])")
_MAY_HAVE_MARKER = re.compile(r"[\[(【]|https?://|www\.")
_EMPTY_PARENS = re.compile(r"\(\s*[,;]?\s*\)")


@dataclass(frozen=True, slots=True)
class Marker:
    """One citation marker found in a text: ``text[start:end]`` is what was matched,
    ``labels`` its normalised labels, ``keep`` the text that stays in its place."""

    start: int
    end: int
    labels: tuple[str, ...]
    keep: str = ""


def find_markers(text: str) -> list[Marker]:
    """All citation markers in ``text``, in order."""
    return [_marker(m) for m in MARKER_RE.finditer(text)]


def strip_markers(text: str) -> tuple[str, list[str]]:
    """``text`` without its markers (tidied whitespace) and the markers' labels, in order of
    first appearance, without duplicates."""
    markers = find_markers(text) if _MAY_HAVE_MARKER.search(text) else []
    if not markers:
        return tidy(text), []
    pieces: list[str] = []
    labels: list[str] = []
    last = 0
    for marker in markers:
        pieces.append(text[last:marker.start])
        pieces.append(marker.keep)
        labels.extend(marker.labels)
        last = marker.end
    pieces.append(text[last:])
    return tidy("".join(pieces)), unique(labels)


def normalize_marker(raw: str) -> list[str]:
    """Labels of one marker as a model or a user may write it: ``"[2]"``, ``"2"``,
    ``"[1-3]"``, ``"^1"``, ``"(Smith et al., 2020)"``, a URL. Unknown text is kept, trimmed."""
    value = raw.strip()
    match = MARKER_RE.fullmatch(value)
    if match is not None:
        return list(_marker(match).labels)
    inner = value.strip("[]()【】 ").lstrip("^").strip()
    if re.fullmatch(_NUM_LIST, inner):
        return _expand_numbers(inner)
    return [inner] if inner else []


def tidy(text: str) -> str:
    """Collapse whitespace and remove spaces left before punctuation and empty brackets."""
    if "(" in text:
        text = _EMPTY_PARENS.sub("", text)
    text = " ".join(text.split())
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text) if " " in text else text


def unique(items: Iterable[str]) -> list[str]:
    """Items in first-seen order, without duplicates."""
    return list(dict.fromkeys(items))


def _marker(match: re.Match[str]) -> Marker:
    start, end = match.span()
    groups = match.groupdict()
    if groups["link"] is not None:
        return _link_marker(start, end, groups["anchor"], groups["link"])
    if groups["nums"] is not None:
        return Marker(start, end, tuple(_expand_numbers(groups["nums"])))
    if groups["foot"] is not None:
        return Marker(start, end, (groups["foot"],))
    if groups["browse"] is not None:
        return Marker(start, end, (groups["browse"],))
    if groups["cites"] is not None:
        return Marker(start, end, tuple(_author_years(groups["cites"])))
    return _url_marker(start, groups["url"])


def _link_marker(start: int, end: int, anchor: str, link: str) -> Marker:
    inner = anchor.strip().lstrip("^")
    if re.fullmatch(_NUM_LIST, inner):
        return Marker(start, end, tuple(_expand_numbers(inner)))
    return Marker(start, end, (link,), keep=anchor)


def _url_marker(start: int, url: str) -> Marker:
    trimmed = url.rstrip(_URL_TRAILING)
    return Marker(start, start + len(trimmed), (trimmed,))


def _expand_numbers(spec: str) -> list[str]:
    if spec.isdigit():
        return [str(int(spec))]
    labels: list[str] = []
    for part in re.split(r"\s*[,;]\s*", spec.replace("^", "").strip()):
        bounds = re.split(r"\s*[-–—]\s*", part)
        if len(bounds) == 2 and 0 <= int(bounds[1]) - int(bounds[0]) < MAX_RANGE:
            labels.extend(str(n) for n in range(int(bounds[0]), int(bounds[1]) + 1))
        else:
            labels.extend(str(int(b)) for b in bounds if b)
    return unique(labels)


def _author_years(cites: str) -> list[str]:
    out = []
    for match in _ONE_AUTHOR_YEAR.finditer(cites):
        label = re.sub(r"\s+", " ", match.group(0).replace(",", ""))
        out.append(label.replace("et al ", "et al. "))
    return out
