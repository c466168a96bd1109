"""The URLs an answer cites: :func:`normalize_url` (one spelling per URL: lower-cased
scheme and host, IDNA, default ports dropped, path and query quoted, trailing punctuation
and unbalanced closers trimmed; None for what is not a usable http(s) URL), and
:func:`extract_sources` (the cited URLs found in an answer's free text: JSON lists,
numbered reference lines, inline URLs), for audit input without a ``sources`` field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit, urlunsplit

from medverify.citations import MARKER_RE
from medverify.records import Source

_URL_TRAILING = ".,;:!?'\"*_"
_CLOSERS = {")": "(", "]": "[", "}": "{"}
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST = re.compile(r"[a-z0-9_.-]{1,253}|[0-9a-f:.]{2,45}")


def clean_url(raw: str) -> str | None:
    """The normalised URL, or the raw one trimmed when it cannot be normalised (the fetcher
    then records why it is not valid); None for an empty string."""
    stripped = raw.strip()
    if not stripped:
        return None
    return normalize_url(stripped) or stripped


# --------------------------------------------------------------------------- URLs


def normalize_url(raw: str) -> str | None:
    """A canonical form of a cited URL, or None when it is not a URL with a host.

    Strips whitespace, angle brackets and trailing punctuation, adds ``https://`` to
    ``www.`` hosts, lower-cases scheme and host, encodes the host with IDNA, drops the
    fragment and a default port, keeps the query, percent-encodes unsafe characters.
    """
    text = _trim_url(raw)
    if text.lower().startswith("www."):
        text = "https://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = _idna(parts.hostname or "")
    if not scheme or not _HOST.fullmatch(host):
        return None
    netloc = _netloc(parts.username, parts.password, host, port, scheme)
    path = quote(parts.path, safe=_PATH_SAFE) or "/"
    return urlunsplit((scheme, netloc, path, quote(parts.query, safe=_QUERY_SAFE), ""))


def _trim_url(raw: str) -> str:
    text = raw.strip().strip("<>").strip()
    while text and (text[-1] in _URL_TRAILING or _unbalanced_closer(text)):
        text = text[:-1]
    return text


def _unbalanced_closer(text: str) -> bool:
    last = text[-1]
    return last in _CLOSERS and text.count(last) > text.count(_CLOSERS[last])


def _idna(host: str) -> str:
    host = host.strip(".").lower()
    if not host or host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return ""


def _netloc(user: str | None, password: str | None, host: str, port: int | None,
            scheme: str) -> str:
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and _DEFAULT_PORTS.get(scheme) != port:
        netloc = f"{netloc}:{port}"
    if user:
        netloc = f"{user}:{password}@{netloc}" if password else f"{user}@{netloc}"
    return netloc


# --------------------------------------------------------------------------- extraction

_JSON_START = re.compile(
    r"\{\s*\"(?:sources|references|citations|urls|links)\"\s*:"
    r"|\[\s*(?:\"\s*(?:https?://|www\.)|\{\s*\"(?:url|link|href|title|id|marker)\")",
    re.IGNORECASE,
)
_REFERENCE_LINE = re.compile(
    r"^[ \t>*-]*(?:\[\^?(?P<bracket>\d{1,4})\]:?|(?P<plain>\d{1,4})[.):])[ \t]+(?P<rest>.+)$",
    re.MULTILINE,
)
LINE_URL = re.compile(r"(?:https?://|www\.)[^\s<>\"'\]]+|<(?:https?://|www\.)[^>\s]+>")
_URL_KEYS = ("url", "link", "href", "uri", "source")
_ID_KEYS = ("marker", "id", "number", "index", "n")
MAX_JSON_ATTEMPTS = 20


class _Hit(NamedTuple):
    """One URL occurrence in an answer: where, the raw URL, any number and title it carries."""

    position: int
    raw: str
    number: str | None = None
    title: str | None = None


@dataclass
class _Found:
    """URLs found in an answer, in order of first appearance, with any number they carry."""

    order: dict[str, None] = field(default_factory=dict)
    numbers: dict[str, str] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)

    def add(self, hit: _Hit) -> None:
        url = clean_url(hit.raw)
        if url is None:
            return
        self.order.setdefault(url, None)
        if hit.number and url not in self.numbers and hit.number not in self.numbers.values():
            self.numbers[url] = hit.number
        if hit.title and url not in self.titles:
            self.titles[url] = hit.title


def extract_sources(answer_text: str) -> list[Source]:
    """The sources an answer cites, found in its text: JSON source lists, numbered
    reference lists (``[1] https://...``, ``1. https://...``), markdown links and bare URLs.

    URLs are normalised and deduplicated, in order of first appearance. A URL that carries
    a number (reference list, ``[2](url)`` link, JSON ``marker``/``id``) gets it as
    ``Source.id`` so ``[n]`` markers resolve; when no URL is numbered they are numbered
    1..n, else the unnumbered ones get ``u1``, ``u2``...
    """
    hits = [*_json_lists(answer_text), *_reference_lines(answer_text), *_inline_urls(answer_text)]
    found = _Found()
    for hit in sorted(hits, key=lambda h: h.position):
        found.add(hit)
    return _as_sources(found)


def _json_lists(text: str) -> list[_Hit]:
    decoder = json.JSONDecoder()
    hits: list[_Hit] = []
    position = 0
    for _ in range(MAX_JSON_ATTEMPTS):
        match = _JSON_START.search(text, position)
        if match is None:
            break
        try:
            value, position = decoder.raw_decode(text, match.start())
        except (json.JSONDecodeError, RecursionError):
            position = match.end()
            continue
        hits.extend(_Hit(match.start() + n, *found) for n, found in enumerate(_json_urls(value)))
    return hits


def _json_urls(value: Any) -> list[tuple[str, str | None, str | None]]:
    """(url, number, title) of every URL in a parsed JSON value, in order."""
    if isinstance(value, str):
        return [(value, None, None)] if LINE_URL.match(value.strip()) else []
    if isinstance(value, list):
        return [found for entry in value for found in _json_urls(entry)]
    if isinstance(value, dict):
        return _json_object(value)
    return []


def _json_object(obj: dict[str, Any]) -> list[tuple[str, str | None, str | None]]:
    lowered = {str(k).lower(): v for k, v in obj.items()}
    url = next((lowered[k] for k in _URL_KEYS if isinstance(lowered.get(k), str)), None)
    if url is None:
        return [found for entry in obj.values() for found in _json_urls(entry)]
    number = next((str(lowered[k]).strip() for k in _ID_KEYS if _is_number(lowered.get(k))), None)
    title = lowered.get("title")
    return [(url, number, title if isinstance(title, str) else None)]


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit())


def _reference_lines(text: str) -> list[_Hit]:
    hits = []
    for match in _REFERENCE_LINE.finditer(text):
        url_match = LINE_URL.search(match.group("rest"))
        if url_match is None:
            continue
        number = str(int(match.group("bracket") or match.group("plain")))
        title = match.group("rest")[: url_match.start()].strip(" \t:-–—|,") or None
        hits.append(_Hit(match.start(), url_match.group(0), number, title))
    return hits


def _inline_urls(text: str) -> list[_Hit]:
    hits = []
    for match in MARKER_RE.finditer(text):
        link, url = match.group("link"), match.group("url")
        if link is not None:
            anchor = match.group("anchor").strip().lstrip("^")
            hits.append(_Hit(match.start(), link, str(int(anchor)) if anchor.isdigit() else None))
        elif url is not None:
            hits.append(_Hit(match.start(), url))
    return hits


def _as_sources(found: _Found) -> list[Source]:
    numbered = bool(found.numbers)
    sources = []
    for index, url in enumerate(found.order, 1):
        if url in found.numbers:
            source_id = found.numbers[url]
        else:
            source_id = f"u{index}" if numbered else str(index)
        sources.append(Source(id=source_id, url=url, title=found.titles.get(url)))
    return sources
