"""Reading answers to check from bytes: plain text, a JSON object, or JSON Lines.

Untrusted input never crashes the reader: binary data is refused with a clear error,
undecodable bytes are replaced and counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from medverify.errors import InputError
from medverify.records import Answer, Source

_BINARY_SNIFF = 8192


@dataclass
class ReadResult:
    answers: list[Answer]
    warnings: list[str] = field(default_factory=list)


def decode(data: bytes) -> tuple[str, int]:
    """Decode bytes as UTF-8 (BOM tolerated), replacing bad bytes; returns text and the
    number of replacements. Refuses data that looks binary."""
    head = data[:_BINARY_SNIFF]
    if b"\x00" in head:
        raise InputError("the input looks binary (NUL bytes); give a text, JSON or JSONL file")
    text = data.decode("utf-8-sig", errors="replace")
    return text, text.count("\ufffd") - data.decode("utf-8-sig", "ignore").count("\ufffd")


def read_answers(data: bytes, *, question: str | None = None) -> ReadResult:
    """Parse answers: a JSON object ``{"answer", "question"?, "sources"?, "id"?}``, JSON Lines
    of such objects, or else the whole input as one plain-text answer."""
    text, replaced = decode(data)
    warnings = [f"{replaced} undecodable byte(s) replaced with U+FFFD"] if replaced else []
    stripped = text.strip()
    if not stripped:
        raise InputError("the input is empty: nothing to check")
    objects = _json_objects(stripped)
    if objects is None:
        return ReadResult([Answer(text=text, question=question)], warnings)
    answers = [_answer(obj, question, n) for n, obj in enumerate(objects, 1)]
    return ReadResult(answers, warnings)


def _json_objects(text: str) -> list[dict[str, Any]] | None:
    if not text.startswith("{"):
        return None
    try:
        whole = json.loads(text)
        return [whole] if isinstance(whole, dict) and "answer" in whole else None
    except json.JSONDecodeError:
        pass
    objects = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if n == 1:
                return None
            raise InputError(f"line {n} is not valid JSON: {exc.msg}") from None
        if not isinstance(obj, dict) or "answer" not in obj:
            raise InputError(f"line {n}: expected an object with an 'answer' field")
        objects.append(obj)
    return objects


def _answer(obj: dict[str, Any], question: str | None, n: int) -> Answer:
    try:
        sources = [_source(s, i) for i, s in enumerate(obj.get("sources") or [], 1)]
        known = {"answer", "question", "sources", "id"}
        return Answer(
            text=str(obj["answer"]),
            question=obj.get("question") or question,
            sources=sources,
            id=str(obj.get("id") or ""),
            meta={k: v for k, v in obj.items() if k not in known},
        )
    except (ValidationError, TypeError, ValueError) as exc:
        raise InputError(f"answer {n}: {exc}") from None


def _source(raw: Any, index: int) -> Source:
    if isinstance(raw, str):
        return Source(id=str(index), url=raw)
    if not isinstance(raw, dict):
        raise ValueError(f"source {index} must be a URL string or an object")
    text = raw.get("text")
    return Source(
        id=str(raw.get("id") or index),
        url=raw.get("url"),
        title=raw.get("title"),
        text=text,
        status="given" if text else "not_fetched",
    )
