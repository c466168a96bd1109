"""Asking one model one benchmark question, as in SourceCheckup.

The model is asked (prompt ``bench_answer``) for a short answer and a structured JSON list
of URL sources. Its reply is parsed tolerantly: a JSON object (also inside a code fence or
after some prose; source lists under ``sources``, ``references``, ``citations``, ``urls``
or ``links``, as objects or plain strings), else the paper's fallback: URLs taken from the
free text with :func:`medverify.audit.cited_urls.extract_sources`. URLs are normalised,
non-http(s) or unusable entries counted in ``dropped_urls`` and repeats in
``duplicate_urls``.

An empty reply, or one without usable JSON or without an answer, is asked once more
(``BenchSettings.retries`` extra attempts); every attempt is kept and the best one is
used (OK > FALLBACK > NO_SOURCES > REFUSAL > EMPTY). A provider failure (after the
facade's own retries) gives an ERROR reply. :meth:`Asker.ask` never raises for a bad reply.

Refusals are detected conservatively (:func:`is_refusal`): a reply is a refusal only when
it cites no URL and *every* sentence of its answer is a decline ("I can't provide medical
advice"), a disclaimer ("I am not a doctor") or a referral ("Please consult a healthcare
professional"), with no "but"/"however" that would introduce real content.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from medverify.audit.cited_urls import extract_sources, normalize_url
from medverify.bench.records import Attempt, ModelReply, Question, ReplyStatus
from medverify.config import BenchSettings
from medverify.errors import ParseError, ProviderError
from medverify.files import clean_record
from medverify.llm.base import Completion, Message
from medverify.llm.facade import Model
from medverify.prompts import load_prompt
from medverify.prompts.untrusted import load_json_reply
from medverify.records import Source

STAGE = "bench_answer"

_RANK = {
    ReplyStatus.OK: 5,
    ReplyStatus.FALLBACK: 4,
    ReplyStatus.NO_SOURCES: 3,
    ReplyStatus.REFUSAL: 2,
    ReplyStatus.EMPTY: 1,
    ReplyStatus.ERROR: 0,
}
_ANSWER_KEYS = ("answer", "response", "short_answer")
_SOURCE_KEYS = ("sources", "references", "citations", "urls", "links")
_URL_KEYS = ("url", "link", "href", "uri", "source")
_TITLE_KEYS = ("title", "name")
_MAX_JSON_TRIES = 20


# -- time accounting --------------------------------------------------------------------


class CallClock:
    """Seconds during which at least one model call was in flight (the union of the call
    intervals), shared by the askers of a study."""

    def __init__(self) -> None:
        self._active = 0
        self._since = 0.0
        self._busy = 0.0

    @contextmanager
    def track(self) -> Iterator[None]:
        if self._active == 0:
            self._since = time.perf_counter()
        self._active += 1
        try:
            yield
        finally:
            self._active -= 1
            if self._active == 0:
                self._busy += time.perf_counter() - self._since

    @property
    def busy_s(self) -> float:
        open_interval = time.perf_counter() - self._since if self._active else 0.0
        return self._busy + open_interval


# -- parsing ------------------------------------------------------------------------------


@dataclass
class ParsedReply:
    """One reply text, parsed. ``problem`` says why it deserves another try (None when
    the reply is acceptable as it is)."""

    status: ReplyStatus
    answer: str = ""
    sources: list[Source] = field(default_factory=list)
    parsed_from: str | None = None
    duplicate_urls: int = 0
    dropped_urls: int = 0
    problem: str | None = None

    @property
    def rank(self) -> tuple[int, bool]:
        return _RANK[self.status], self.problem is None


def parse_reply(raw: str) -> ParsedReply:
    """A model's reply to the benchmark prompt as answer, sources and status."""
    if not raw.strip():
        return ParsedReply(ReplyStatus.EMPTY, problem="empty reply")
    obj = find_json_object(raw)
    parsed = _from_json(obj) if obj is not None else None
    if parsed is not None:
        return parsed
    problem = "invalid JSON" if obj is None else "JSON without an answer or sources"
    return _from_text(raw, problem)


def find_json_object(raw: str) -> dict[str, Any] | None:
    """The reply's JSON object: the whole reply (a ```json fence tolerated), else the first
    object after some prose that has an answer or a source list."""
    try:
        value = load_json_reply(raw)
    except (ParseError, RecursionError):
        value = None
    if isinstance(value, dict):
        return _known_object(value) or value
    decoder = json.JSONDecoder()
    for match in islice(re.finditer(r"\{", raw), _MAX_JSON_TRIES):
        try:
            value, _ = decoder.raw_decode(raw, match.start())
        except (ValueError, RecursionError):  # not JSON, too deep, an integer too long
            continue
        found = _known_object(value) if isinstance(value, dict) else None
        if found is not None:
            return found
    return None


def _known_object(obj: dict[str, Any]) -> dict[str, Any] | None:
    """``obj`` when it has an answer or source key, else such an object nested one level."""
    if _has_known_key(obj):
        return obj
    inner = (v for v in obj.values() if isinstance(v, dict))
    return next((v for v in inner if _has_known_key(v)), None)


def _has_known_key(obj: dict[str, Any]) -> bool:
    lowered = _lowered(obj)
    return any(k in lowered for k in (*_ANSWER_KEYS, *_SOURCE_KEYS))


def _lowered(obj: dict[str, Any]) -> dict[str, Any]:
    return {str(k).strip().lower(): v for k, v in obj.items()}


def _from_json(obj: dict[str, Any]) -> ParsedReply | None:
    lowered = _lowered(obj)
    answer_key = next((k for k in _ANSWER_KEYS if k in lowered), None)
    source_key = next((k for k in _SOURCE_KEYS if k in lowered), None)
    if answer_key is None and source_key is None:
        return None
    answer = _answer_text(lowered.get(answer_key)) if answer_key else ""
    entries = _entries(lowered[source_key]) if source_key else []
    sources, duplicates, dropped = collect_sources(entries)
    counts = {"duplicate_urls": duplicates, "dropped_urls": dropped}
    if not answer:
        return ParsedReply(ReplyStatus.EMPTY, "", sources, "json",
                           problem="JSON reply without an answer", **counts)
    if sources:
        return ParsedReply(ReplyStatus.OK, answer, sources, "json", **counts)
    return _without_listed_sources(answer, counts)


def _without_listed_sources(answer: str, counts: dict[str, int]) -> ParsedReply:
    """A JSON answer whose source list has no usable URL: URLs in the answer text are used
    (the paper's fallback), else it is a refusal or an answer without sources."""
    inline = extract_sources(answer)
    if inline:
        return ParsedReply(ReplyStatus.FALLBACK, strip_url_list(answer) or answer, inline,
                           "text", **counts)
    status = ReplyStatus.REFUSAL if is_refusal(answer) else ReplyStatus.NO_SOURCES
    return ParsedReply(status, answer, [], "json", **counts)


def _from_text(raw: str, problem: str) -> ParsedReply:
    """No usable JSON: the paper's regex fallback on the free text."""
    fragment = _json_answer_fragment(raw)
    sources = extract_sources(raw)
    if sources:
        answer = fragment if fragment else strip_url_list(raw)
        duplicates = _text_duplicates(raw, sources)
        return ParsedReply(ReplyStatus.FALLBACK, answer, sources, "text",
                           duplicate_urls=duplicates, problem=problem)
    answer = fragment or raw.strip()
    status = ReplyStatus.REFUSAL if is_refusal(answer) else ReplyStatus.NO_SOURCES
    return ParsedReply(status, answer, [], "text", problem=problem)


def _answer_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return "\n".join(str(v).strip() for v in value if v is not None).strip()
    return str(value).strip()


def _entries(value: Any) -> list[Any]:
    """The entries of a source list: a list, a string of URLs, or an object's values."""
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        return [part for part in re.split(r"[\s,;]+", value) if part]
    if isinstance(value, dict):
        return list(value.values())
    return [] if value is None else [value]


MAX_SOURCES = 50
"""Distinct URLs kept from one reply (a reply listing 10,000 would mean 10,000 fetches and
up to ``max_claims`` x 10,000 judged pairs)."""


def collect_sources(entries: Iterable[Any]) -> tuple[list[Source], int, int]:
    """Sources ``1``, ``2``... from source-list entries (URL strings or objects with a
    URL and a title); returns them with the counts of duplicate and dropped entries. At
    most :data:`MAX_SOURCES` distinct URLs are kept (each is fetched and judged against
    every statement); the rest are counted as dropped."""
    found: dict[str, Source] = {}
    duplicates = dropped = 0
    for entry in entries:
        raw_url, title = _entry(entry)
        url = http_url(raw_url) if raw_url else None
        if url is None or (url not in found and len(found) >= MAX_SOURCES):
            dropped += 1
        elif url in found:
            duplicates += 1
        else:
            found[url] = Source(id=str(len(found) + 1), url=url, title=title)
    return list(found.values()), duplicates, dropped


def _entry(entry: Any) -> tuple[str | None, str | None]:
    if isinstance(entry, str):
        return entry, None
    if not isinstance(entry, dict):
        return None, None
    lowered = _lowered(entry)
    url = next((lowered[k] for k in _URL_KEYS if isinstance(lowered.get(k), str)), None)
    title = next((lowered[k] for k in _TITLE_KEYS if isinstance(lowered.get(k), str)), None)
    return url, (title.strip() or None) if title else None


def http_url(raw: str) -> str | None:
    """The normalised URL when it is an http(s) URL with a host, else None."""
    url = normalize_url(raw)
    if url is None or not url.startswith(("http://", "https://")):
        return None
    return url


_ANSWER_FRAGMENT = re.compile(
    r'(?:"|\b)(?:answer|response|short_answer)"?\s*:\s*"((?:[^"\\]|\\.)*)',
    re.IGNORECASE | re.DOTALL)  # the key may be unquoted: {answer: "..."}


def _json_answer_fragment(raw: str) -> str | None:
    """The answer string of a broken (e.g. cut-off) JSON reply, when one can be read."""
    match = _ANSWER_FRAGMENT.search(raw)
    if match is None:
        return None
    body = match.group(1)
    try:
        text = json.loads(f'"{body}"')
    except json.JSONDecodeError:
        text = body.replace('\\"', '"').replace("\\n", "\n")
    return text.strip() or None


_TEXT_URL = re.compile(r"(?:https?://|www\.)[^\s<>\"'\]]+")


def _text_duplicates(raw: str, sources: list[Source]) -> int:
    """How many times URLs of ``sources`` occur in the text beyond their first mention."""
    urls = {s.url for s in sources}
    counts = Counter(http_url(m.group(0)) for m in _TEXT_URL.finditer(raw))
    return sum(n - 1 for url, n in counts.items() if url in urls and n > 1)


# -- the answer without its URL list (fallback) --------------------------------------------

_HEADING = re.compile(
    r"^\W*(?:sources?|references?|citations?|links?|further reading|bibliography|"
    r"urls?)\W*$", re.IGNORECASE)
_LIST_PREFIX = re.compile(r"^\s*(?:[-*•>]+|\[\^?\d{1,4}\]:?|\d{1,4}[.):])\s*")
_MD_LINK = re.compile(r"\[([^\]\n]*)\]\(\s*<?(?:https?://|www\.)[^)\s]*>?\s*\)")
_URL_IN_TEXT = re.compile(r"<?(?:https?://|www\.)[^\s<>\"']+>?")
_PAREN_URL = re.compile(r"\(\s*<?(?:https?://|www\.)[^\s<>\"'()]*(?:\([^\s()]*\)[^\s<>\"'()]*)*>?\s*\)")
_TRAILING = ".,;:!?"
_MAX_REFERENCE_WORDS = 12


def strip_url_list(text: str) -> str:
    """``text`` without its list of URLs: heading lines ("Sources:"), reference lines (a
    list item that is a URL with at most a short title) and URL-only lines are dropped,
    markdown links keep their text and remaining inline URLs are removed."""
    kept = [_clean_line(line) for line in text.splitlines() if not _is_reference_line(line)]
    body = "\n".join(line for line in kept if line is not None)
    return re.sub(r"\n{3,}", "\n\n", body).strip()


def _is_reference_line(line: str) -> bool:
    if _HEADING.match(line):
        return True
    if not _URL_IN_TEXT.search(line):
        return False
    rest = _URL_IN_TEXT.sub(" ", _MD_LINK.sub(r" \1 ", line))
    rest = _LIST_PREFIX.sub("", rest)
    words = re.findall(r"\w+", rest)
    if not words:
        return True
    return bool(_LIST_PREFIX.match(line)) and len(words) <= _MAX_REFERENCE_WORDS


def _clean_line(line: str) -> str | None:
    text = _MD_LINK.sub(_link_text, line)
    text = _URL_IN_TEXT.sub(_keep_trailing, _PAREN_URL.sub("", text))
    text = re.sub(r"\(\s*\)|\[\s*\]", "", text)
    text = re.sub(r"[ \t]+([.,;:!?)])", r"\1", text)
    text = re.sub(r"[ \t]{2,}", " ", text).rstrip()
    return text if text.strip() or not line.strip() else None


def _keep_trailing(match: re.Match[str]) -> str:
    """Nothing of a removed URL but the sentence punctuation or closing bracket after it."""
    url, tail = match.group(0), ""
    while url and (url[-1] in _TRAILING or (url[-1] == ")" and url.count(")") > url.count("("))):
        url, tail = url[:-1], url[-1] + tail
    return tail


def _link_text(match: re.Match[str]) -> str:
    anchor = match.group(1).strip()
    return f"[{anchor}]" if anchor.lstrip("^").isdigit() else anchor


# -- refusals -----------------------------------------------------------------------------

_DECLINE = re.compile(
    r"^(?:(?:i'?m|i am)\s+(?:so\s+|very\s+)?sorry|sorry|unfortunately|apologies)?[,.!]?\s*"
    r"(?:but\s+)?(?:as an ai(?:\s+(?:language\s+model|assistant|model))?,?\s*)?"
    r"i\s*(?:can\s*not|can'?t|cannot|am\s+unable\s+to|'?m\s+unable\s+to|am\s+not\s+able\s+to|"
    r"'?m\s+not\s+able\s+to|won'?t|will\s+not|must\s+decline\s+to|do\s+not|don'?t)\s+"
    r"(?:provide|give|offer|answer|help|assist|respond|diagnose|recommend|comply|share)\b",
    re.IGNORECASE,
)
_REFERRAL = re.compile(
    r"^(?:please\s+)?(?:(?:you\s+)?(?:should|must)\s+)?(?:always\s+)?"
    r"(?:consult|see|talk\s+to|speak\s+(?:to|with)|contact|ask|seek\s+(?:advice|help|guidance)"
    r"\s+from)\s+(?:with\s+)?(?:a|an|your)\s+(?:qualified\s+|licensed\s+|own\s+)?"
    r"(?:doctor|physician|healthcare|health\s+care|medical|clinician|pharmacist|health)\b",
    re.IGNORECASE,
)
_DISCLAIMER = re.compile(
    r"^(?:as an ai\b|(?:i'?m|i am)\s+(?:not|only)\s+(?:a\s+|an\s+)?(?:doctor|physician|"
    r"medical|healthcare|ai)\b|(?:this|it)\s+is\s+not\s+(?:medical|professional)\s+advice\b|"
    r"(?:i'?m|i am)\s+(?:so\s+)?sorry[.!]?$)",
    re.IGNORECASE,
)
_CONTENT_TURN = re.compile(r"\b(?:but|however|although|though|that said)\b", re.IGNORECASE)
_MAX_REFUSAL_CHARS = 600


def is_refusal(answer: str) -> bool:
    """True when every sentence of ``answer`` declines, disclaims or refers the reader to a
    professional (and nothing turns to real content with "but"/"however"). Conservative:
    an answer with any other sentence is not a refusal."""
    text = answer.strip()
    if not text or len(text) > _MAX_REFUSAL_CHARS:
        return False
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]
    return all(_refusal_sentence(s.strip("*_ \"'")) for s in sentences)


def _refusal_sentence(sentence: str) -> bool:
    text = sentence.replace("\u2019", "'")
    if _CONTENT_TURN.search(_DECLINE.sub("", text, count=1)):
        return False
    return any(p.match(text) for p in (_DECLINE, _REFERRAL, _DISCLAIMER))


# -- asking ---------------------------------------------------------------------------------


class Asker:
    """Asks one model under test (labelled ``label`` in the study) benchmark questions."""

    def __init__(self, model: Model, label: str, *, settings: BenchSettings,
                 prompt_version: str = "v1", clock: CallClock | None = None) -> None:
        self.model = model
        self.label = label
        self.settings = settings
        self.prompt = load_prompt(STAGE, prompt_version)
        self.clock = clock or CallClock()

    @property
    def stage(self) -> str:
        return f"{STAGE}:{self.label}"

    @property
    def prompt_version(self) -> str:
        return self.prompt.id

    async def ask(self, question: Question) -> ModelReply:
        """The model's reply to ``question``; never raises for a bad reply or a provider
        failure (ERROR reply, the error kept in its attempt)."""
        messages = self.prompt.render(question=question.text)
        attempts: list[Attempt] = []
        parses: list[ParsedReply] = []
        for number in range(self.settings.retries + 1):
            try:
                completion = await self._complete(messages, attempt=number)
            except ProviderError as exc:
                attempts.append(Attempt(error=str(exc) or type(exc).__name__))
                break
            parsed = parse_reply(completion.text)
            attempts.append(_attempt(completion, parsed.problem))
            parses.append(parsed)
            if parsed.problem is None:
                break
        return clean_record(self._reply(question, attempts, parses))

    async def _complete(self, messages: list[Message], *, attempt: int) -> Completion:
        """One call. A retry carries ``seed=attempt``: a new request (the identical one would
        be answered from the cache with the very reply just found wanting) that is itself
        cached, so rerunning a study never pays for a retry twice."""
        with self.clock.track():
            return await self.model.complete(
                messages, stage=self.stage, json_mode=True, seed=attempt or None,
                max_tokens=self.settings.max_tokens, temperature=self.settings.temperature,
            )

    def _reply(self, question: Question, attempts: list[Attempt],
               parses: list[ParsedReply]) -> ModelReply:
        best = max(parses, key=lambda p: p.rank) if parses else None
        common: dict[str, Any] = {
            "question_id": question.id, "model": self.label, "spec": self.model.spec,
            "attempts": attempts, "prompt_version": self.prompt_version,
        }
        if best is None:
            return ModelReply(status=ReplyStatus.ERROR, **common)
        return ModelReply(
            status=best.status, answer=best.answer, sources=best.sources,
            parsed_from=best.parsed_from, duplicate_urls=best.duplicate_urls,
            dropped_urls=best.dropped_urls, **common,
        )


def _attempt(completion: Completion, problem: str | None) -> Attempt:
    if problem and completion.finish_reason == "length":
        problem += " (output cut off at max_tokens)"
    return Attempt(
        raw=completion.text, problem=problem, finish_reason=completion.finish_reason,
        prompt_tokens=completion.usage.prompt_tokens,
        completion_tokens=completion.usage.completion_tokens,
        estimated_tokens=completion.usage.estimated, cached=completion.cached,
        latency_s=completion.latency_s,
    )
