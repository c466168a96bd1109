"""Reading audit input: JSONL answers with their cited sources and, optionally, claims.

One answer per line::

    {"id", "question", "answer", "sources": [{"url", "text"?, "marker"?, "title"?}],
     "claims"?: [{"text", "label"?}], ...extra fields}

Extra fields go to ``answer.meta`` (breakdowns group by them). A source's id is its
``marker`` (the ``[n]`` number the answer uses) when given, else its 1-based position.
Without ``sources``, an ``attribution`` list of ``"[n] URL"`` strings (ExpertQA) is read;
without either, the cited URLs are extracted from the answer text
(:func:`medverify.audit.cited_urls.extract_sources`).
Claim ``evidence`` entries ``"[n] URL\n\npassage"`` (ExpertQA) give the frozen text of
source ``n``. A bad line is a warning with its line number, never a crash; a field that
looks like it holds sources but is not read is a warning too (:func:`unread_source_fields`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from medverify.audit.cited_urls import LINE_URL, clean_url, extract_sources
from medverify.audit.records import AuditInput, GoldClaim, SupportLabel
from medverify.citations import strip_markers
from medverify.records import Answer, Claim, Source, Span

MAX_LINE_BYTES = 50_000_000
_KNOWN_FIELDS = frozenset({"id", "question", "answer", "sources", "claims"})
SOURCE_LIKE_FIELDS = frozenset({
    "sources", "attribution", "attributions", "citations", "citation", "references",
    "reference", "refs", "urls", "links", "bibliography", "cited", "cited_urls",
})
"""Top-level field names that may hold an answer's sources (warned about when not read)."""
_LABELS = {
    "supported": SupportLabel.SUPPORTED,
    "support": SupportLabel.SUPPORTED,
    "true": SupportLabel.SUPPORTED,
    "yes": SupportLabel.SUPPORTED,
    "complete": SupportLabel.SUPPORTED,
    "not_supported": SupportLabel.NOT_SUPPORTED,
    "unsupported": SupportLabel.NOT_SUPPORTED,
    "false": SupportLabel.NOT_SUPPORTED,
    "no": SupportLabel.NOT_SUPPORTED,
    "incomplete": SupportLabel.NOT_SUPPORTED,
}
_UNLABELLED = frozenset({"partial", "missing", "n/a", "na", "none", ""})
"""Gold values that mean "no binary label" (ExpertQA ``support``: Partial, Missing, N/A)."""
_NUMBERED_URL = re.compile(r"^\s*\[\^?(?P<n>\d{1,4})\]:?\s*(?P<url>\S+)\s*$")
_EVIDENCE = re.compile(r"^\s*\[(?P<n>\d{1,4})\]\s*(?P<url>\S+)[ \t]*(?:\n(?P<text>.*))?\Z",
                       re.DOTALL)


class LineError(ValueError):
    """One input line that cannot be used (the reader turns it into a warning)."""


# --------------------------------------------------------------------------- reading


def read_audit(data: bytes, *, source_name: str = "") -> tuple[list[AuditInput], list[str]]:
    """Parse audit JSONL. Returns the inputs and warnings (``name:line: problem``); bad
    lines are skipped, duplicated answer ids are made unique."""
    prefix = f"{source_name}:" if source_name else "line "
    inputs: list[AuditInput] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            item, notes = _parse_line(raw, number)
        except LineError as exc:
            warnings.append(f"{prefix}{number}: {exc}")
            continue
        item = _unique_id(item, seen, notes)
        warnings.extend(f"{prefix}{number}: {note}" for note in notes)
        inputs.append(item)
    return inputs, warnings


def _parse_line(raw: bytes, number: int) -> tuple[AuditInput, list[str]]:
    if len(raw) > MAX_LINE_BYTES:
        raise LineError(f"line is {len(raw):,} bytes, over the limit of {MAX_LINE_BYTES:,}")
    if b"\x00" in raw:
        raise LineError("binary data (NUL bytes), not a JSON line")
    text = raw.decode("utf-8-sig", errors="replace")
    notes = ["undecodable bytes replaced with U+FFFD"] if "\ufffd" in text else []
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise LineError(f"not valid JSON ({getattr(exc, 'msg', exc)})") from None
    if not isinstance(obj, dict):
        raise LineError("expected a JSON object")
    return _input(obj, number, notes), notes


def _input(obj: dict[str, Any], number: int, notes: list[str]) -> AuditInput:
    answer_text = obj.get("answer")
    if not isinstance(answer_text, str) or not answer_text.strip():
        raise LineError("no 'answer' text")
    question = obj.get("question")
    sources, used = _answer_sources(obj, answer_text, notes)
    sources = with_evidence(sources, obj.get("claims"), notes)
    meta = {k: v for k, v in obj.items() if k not in _KNOWN_FIELDS and k != used}
    if obj.get("sources") and used != "sources":
        meta["sources"] = obj["sources"]  # an unread shape: kept, and warned about below
    for name in unread_source_fields(meta):
        notes.append(f"field {name!r} looks like it holds sources but is not read "
                     "(expected 'sources' or 'attribution', see docs/audit.md)")
    try:
        answer = Answer(
            text=answer_text,
            question=str(question) if question is not None else None,
            sources=sources,
            id=_text_id(obj.get("id")),
            meta=meta,
        )
    except ValidationError as exc:
        raise LineError(f"invalid answer: {exc.errors()[0]['msg']}") from None
    claims = _claims(obj.get("claims"), notes) if obj.get("claims") is not None else None
    return AuditInput(answer=answer, claims=claims, line=number)


def _answer_sources(
    obj: dict[str, Any], answer_text: str, notes: list[str]
) -> tuple[list[Source], str | None]:
    """The answer's sources and the field they came from (None: the answer text).
    ``sources`` (a list) wins, then ``attribution`` (``"[n] URL"`` strings), then the text."""
    raw = obj.get("sources")
    if isinstance(raw, list) and raw:
        return read_sources(raw, notes), "sources"
    if raw:
        notes.append(f"'sources' is a {type(raw).__name__}, not a list; not read")
    attribution = read_attribution(obj.get("attribution"))
    if attribution:
        return attribution, "attribution"
    return extract_sources(answer_text), None


def read_attribution(raw: Any) -> list[Source]:
    """Sources from an ExpertQA-style ``attribution`` list: ``"[n] URL"`` strings, the
    marker ``n`` becoming the source id so the answer's ``[n]`` markers resolve to it. A URL
    listed under two markers is kept once (its first marker). Empty when ``raw`` is not
    such a list."""
    if not isinstance(raw, list):
        return []
    sources: list[Source] = []
    seen: set[str] = set()
    for entry in raw:
        match = _NUMBERED_URL.match(entry) if isinstance(entry, str) else None
        if match is None:
            continue
        url = clean_url(match.group("url"))
        marker = str(int(match.group("n")))
        if url is None or url in seen or any(s.id == marker for s in sources):
            continue
        seen.add(url)
        sources.append(Source(id=marker, url=url))
    return sources


def with_evidence(sources: list[Source], raw_claims: Any, notes: list[str]) -> list[Source]:
    """Sources completed with the passages of claim ``evidence`` entries
    (``"[n] URL\n\npassage"``, ExpertQA): a source without text gets the distinct
    passages given for its marker or URL, joined by blank lines, as given text (never
    fetched). An evidence URL that is no source yet becomes one."""
    found = _evidence(raw_claims)
    if not found:
        return sources
    out = list(sources)
    for (marker, url), passages in found.items():
        text = "\n\n".join(passages) or None
        index = next((i for i, s in enumerate(out) if s.url == url or s.id == marker), None)
        if index is None:
            if marker in {s.id for s in out}:
                continue
            notes.append(f"evidence source [{marker}] {url} is not in the answer's sources; added")
            out.append(Source(id=marker, url=url, text=text,
                              status="given" if text else "not_fetched"))
        elif text and not out[index].text:
            out[index] = out[index].model_copy(update={"text": text, "status": "given"})
    return out


def _evidence(raw_claims: Any) -> dict[tuple[str, str], list[str]]:
    """(marker, URL) -> distinct passages, in order, from every claim's ``evidence``."""
    found: dict[tuple[str, str], list[str]] = {}
    if not isinstance(raw_claims, list):
        return found
    for claim in raw_claims:
        entries = claim.get("evidence") if isinstance(claim, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            match = _EVIDENCE.match(entry) if isinstance(entry, str) else None
            url = clean_url(match.group("url")) if match else None
            if match is None or url is None:
                continue
            passages = found.setdefault((str(int(match.group("n"))), url), [])
            text = (match.group("text") or "").strip()
            if text and text not in passages:
                passages.append(text)
    return found


def unread_source_fields(meta: dict[str, Any]) -> list[str]:
    """Fields of ``answer.meta`` (input fields that were not read) that look like they hold
    sources: a source-like name (``citations``, ``references``, ``urls``...) with a value,
    or a list or object with a URL in it."""
    return sorted(k for k, v in meta.items()
                  if v and (k.lower() in SOURCE_LIKE_FIELDS
                            or (isinstance(v, list | dict) and _has_url(v))))


def _has_url(value: Any, depth: int = 0) -> bool:
    if isinstance(value, str):
        return LINE_URL.search(value) is not None
    if depth > 3:
        return False
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return any(_has_url(v, depth + 1) for v in list(items)[:50])


def _text_id(value: Any) -> str:
    if value is None or isinstance(value, (dict, list)):
        return ""
    return str(value).strip()


def _unique_id(item: AuditInput, seen: set[str], notes: list[str]) -> AuditInput:
    answer_id = item.answer.id
    if answer_id not in seen:
        seen.add(answer_id)
        return item
    new_id = f"{answer_id}#{item.line}"
    notes.append(f"duplicate answer id {answer_id!r}, renamed to {new_id!r}")
    seen.add(new_id)
    answer = item.answer.model_copy(update={"id": new_id})
    return item.model_copy(update={"answer": answer})


def read_sources(raw: Any, notes: list[str]) -> list[Source]:
    """Sources given with an answer: URL strings (``"[n] URL"`` too) or objects
    ``{url, text?, marker?, title?}``."""
    if not isinstance(raw, list):
        raise LineError("'sources' must be a list")
    sources: list[Source] = []
    used: set[str] = set()
    for index, entry in enumerate(raw, 1):
        source = _given_source(entry, index)
        if source is None:
            notes.append(f"source {index} is neither a URL string nor an object; skipped")
            continue
        if source.url is None and source.text is None:
            keys = ", ".join(sorted(map(str, entry))) if isinstance(entry, dict) else "none"
            notes.append(f"source {index} has no 'url' and no 'text' (keys: {keys}); "
                         "nothing to check against")
        if source.id in used:
            new_id = f"{source.id}.{index}"
            notes.append(f"duplicate source id {source.id!r}, renamed to {new_id!r}")
            source = source.model_copy(update={"id": new_id})
        used.add(source.id)
        sources.append(source)
    return sources


def _given_source(entry: Any, index: int) -> Source | None:
    if isinstance(entry, str):
        numbered = _NUMBERED_URL.match(entry)
        if numbered:
            return Source(id=str(int(numbered.group("n"))), url=clean_url(numbered.group("url")))
        return Source(id=str(index), url=clean_url(entry))
    if not isinstance(entry, dict):
        return None
    marker = entry.get("marker", entry.get("id"))
    text = entry.get("text")
    text = text if isinstance(text, str) and text.strip() else None
    url = entry.get("url")
    title = entry.get("title")
    return Source(
        id=_text_id(marker) or str(index),
        url=clean_url(url) if isinstance(url, str) else None,
        title=str(title) if title is not None else None,
        text=text,
        status="given" if text else "not_fetched",
    )


def _claims(raw: Any, notes: list[str]) -> list[GoldClaim]:
    if not isinstance(raw, list):
        raise LineError("'claims' must be a list")
    claims = []
    for index, entry in enumerate(raw, 1):
        text, label = _claim_fields(entry)
        if not text:
            notes.append(f"claim {index} has no text; skipped")
            continue
        gold = normalize_label(label)
        if label is not None and gold is None and not _unlabelled(label):
            notes.append(f"claim {index}: unknown label {label!r}, treated as unlabelled")
        claims.append(GoldClaim(text=text, label=gold))
    return claims


def _claim_fields(entry: Any) -> tuple[str, Any]:
    if isinstance(entry, str):
        return entry.strip(), None
    if isinstance(entry, dict):
        text = entry.get("text", entry.get("claim"))
        label = entry.get("label", entry.get("support"))
        return (text.strip() if isinstance(text, str) else ""), label
    return "", None


def _unlabelled(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() in _UNLABELLED


def normalize_label(value: Any) -> SupportLabel | None:
    """A gold label as :class:`SupportLabel` (``"supported"``, ``"NOT SUPPORTED"``, booleans
    ...); None for null or an unknown value."""
    if value is None:
        return None
    if isinstance(value, bool):
        return SupportLabel.SUPPORTED if value else SupportLabel.NOT_SUPPORTED
    if not isinstance(value, str):
        return None
    key = re.sub(r"[\s-]+", "_", value.strip().lower())
    return _LABELS.get(key)


def given_claims(answer: Answer, gold: list[GoldClaim]) -> list[Claim]:
    """Claims given with an answer as :class:`Claim` records (``c1``, ``c2``...): markers
    stripped into ``Claim.markers``, span set where the claim text occurs in the answer."""
    claims = []
    for index, item in enumerate(gold, 1):
        text, markers = strip_markers(item.text)
        start = answer.text.find(item.text)
        span = Span(start=start, end=start + len(item.text)) if start >= 0 else None
        claims.append(
            Claim(id=f"c{index}", text=text or item.text, span=span, markers=markers,
                  decomposer="given")
        )
    return claims
