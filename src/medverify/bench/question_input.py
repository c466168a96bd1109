"""Reading question files: their text decoded, their questions collected and counted.

:func:`decode_bytes` reads a file's bytes as text (UTF-8 with per-line fallbacks, UTF-16),
:class:`Collector` keeps the questions read and counts every record in the
:class:`~medverify.bench.records.ImportReport` (kept, duplicate, missing text, unreadable),
and :func:`json_objects` and :func:`csv_rows` iterate the records of a JSONL or CSV file,
each with the place (line or row) its problems are reported at. The readers of
:mod:`medverify.bench.questions` and :mod:`medverify.bench.question_sets` build on these.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medverify.bench.records import ImportReport, Question
from medverify.errors import InputError
from medverify.records import Document, content_hash

SNIFF_BYTES = 4096  # bytes of a file read to tell its encoding (and its XML root)


# -- decoding ---------------------------------------------------------------------------


@dataclass
class Decoded:
    """A file's text, the encoding it was read with and the lines that needed a fallback."""

    text: str
    encoding: str
    repaired: list[int] = field(default_factory=list)
    fallback: str | None = None


def decode_bytes(raw: bytes) -> Decoded:
    """Decode a question file: UTF-8 (BOM or not), UTF-16 with BOM, and line by line a
    cp1252 (then latin-1) fallback for lines that are not UTF-8. Never fails on odd bytes;
    raises :class:`InputError` only for what looks like a binary file."""
    if raw.startswith(codecs.BOM_UTF8):
        return _decode_lines(raw[len(codecs.BOM_UTF8):], "utf-8-sig")
    if raw.startswith(codecs.BOM_UTF16_LE):
        return _decode_utf16(raw[2:], "utf-16-le")
    if raw.startswith(codecs.BOM_UTF16_BE):
        return _decode_utf16(raw[2:], "utf-16-be")
    if b"\x00" in raw[:SNIFF_BYTES]:
        return _decode_utf16(raw, _utf16_without_bom(raw[:SNIFF_BYTES]))
    return _decode_lines(raw, "utf-8")


def _decode_lines(raw: bytes, label: str) -> Decoded:
    parts: list[str] = []
    decoded = Decoded("", label)
    for number, chunk in enumerate(raw.split(b"\n"), start=1):
        try:
            parts.append(chunk.decode("utf-8"))
        except UnicodeDecodeError:
            text, used = _fallback_decode(chunk)
            parts.append(text)
            decoded.repaired.append(number)
            decoded.fallback = "latin-1" if "latin-1" in (used, decoded.fallback) else used
    decoded.text = "\n".join(parts)
    if decoded.fallback:
        decoded.encoding = f"{label}+{decoded.fallback}"
    return decoded


def _fallback_decode(chunk: bytes) -> tuple[str, str]:
    try:
        return chunk.decode("cp1252"), "cp1252"
    except UnicodeDecodeError:
        return chunk.decode("latin-1"), "latin-1"


def _utf16_without_bom(head: bytes) -> str:
    even, odd = head[0::2].count(0), head[1::2].count(0)
    if max(even, odd) < len(head) // 4:
        raise InputError("this looks like a binary file (NUL bytes), not a question file")
    return "utf-16-le" if odd > even else "utf-16-be"


def _decode_utf16(raw: bytes, codec: str) -> Decoded:
    try:
        return Decoded(raw.decode(codec), "utf-16")
    except UnicodeDecodeError:
        text = raw.decode(codec, errors="replace")
    repaired = [n for n, line in enumerate(text.split("\n"), start=1) if "\ufffd" in line]
    return Decoded(text, "utf-16", repaired, "replacement")


def normalized_text(text: str) -> str:
    """The text compared for duplicates: whitespace collapsed, case folded."""
    return " ".join(text.split()).casefold()


def collapse(text: str | None) -> str:
    return " ".join((text or "").split())


# -- collecting questions -------------------------------------------------------------------


class Collector:
    """Questions kept so far and the report; every record ends in exactly one counter."""

    def __init__(self, report: ImportReport) -> None:
        self.report = report
        self.name = ""  # the file being read, as problem messages name it
        self.questions: list[Question] = []
        self._texts: dict[tuple[str, str], str] = {}
        self._ids: dict[str, str] = {}

    def unreadable(self, where: str, message: str) -> None:
        self.report.read += 1
        self.report.unreadable += 1
        self.report.problems.append(f"{where}: {message}")

    def missing(self, where: str, message: str = "no question text") -> None:
        self.report.read += 1
        self.report.missing_text += 1
        self.report.problems.append(f"{where}: {message}")

    def note(self, message: str) -> None:
        self.report.problems.append(message)

    def offer(self, where: str, text: object, source: str, *, qid: str | None = None,
              reference: Document | None = None, meta: dict[str, Any] | None = None) -> None:
        """Keep one question, or count why not."""
        if text is None or (isinstance(text, str) and not text.strip()):
            self.missing(where)
            return
        if not isinstance(text, str):
            self.unreadable(where, f"question is a {type(text).__name__}, not text")
            return
        norm = normalized_text(text)
        question = Question(id=qid or f"{source}:{content_hash(norm)}", text=text.strip(),
                            source=source, reference=reference, meta=meta or {})
        duplicate = self._duplicate_of(question, norm)
        self.report.read += 1
        if duplicate is not None:
            self.report.duplicates += 1
            self.report.problems.append(f"{where}: {duplicate}")
            return
        self._texts[(question.source, norm)] = where
        self._ids[question.id] = where
        self.report.kept += 1
        self.questions.append(question)

    def _duplicate_of(self, question: Question, norm: str) -> str | None:
        first = self._texts.get((question.source, norm))
        if first is not None:
            return f"duplicate of the question at {first} (source {question.source!r})"
        first = self._ids.get(question.id)
        if first is not None:
            return f"id {question.id!r} already used at {first} by another question; skipped"
        return None


def reference_document(source: str, text: object, url: str | None, *,
                       title: str | None = None,
                       doc_source: str | None = None) -> Document | None:
    """The reference answer/document kept with an imported question, when there is one."""
    body = text.strip() if isinstance(text, str) else ""
    url = url.strip() if url and url.strip() else None
    if not body and url is None:
        return None
    digest = content_hash(f"{url or ''}\x00{body}")
    return Document(doc_id=f"{source}:ref:{digest}", text=body, url=url, title=title or None,
                    source=doc_source or source)


def pick_key(obj: dict[str, Any], candidates: Sequence[str]) -> str | None:
    lowered = {str(key).lower(): key for key in obj}
    for name in candidates:
        if name in lowered:
            return lowered[name]
    return None


# -- records of JSONL and CSV files ---------------------------------------------------------


def json_objects(path: Path, decoded: Decoded, out: Collector
                  ) -> Iterator[tuple[str, dict[str, Any]]]:
    for number, line in enumerate(decoded.text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{out.name} line {number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            out.unreadable(where, f"invalid JSON ({exc.msg} at column {exc.colno})")
            continue
        except RecursionError:
            out.unreadable(where, "invalid JSON (nested too deeply)")
            continue
        if not isinstance(obj, dict):
            out.unreadable(where, f"expected a JSON object, got {type(obj).__name__}")
            continue
        yield where, obj


def csv_rows(path: Path, decoded: Decoded, out: Collector, text_columns: Sequence[str]
              ) -> Iterator[tuple[str, str, dict[str, str]]]:
    """(where, text column, row) for each data row; InputError without a question column."""
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    reader = csv.reader(io.StringIO(decoded.text, newline=""), delimiter=delimiter)
    header = [cell.strip() for cell in next(reader, [])]
    text_key = pick_key(dict.fromkeys(header), [c.lower() for c in text_columns])
    if text_key is None:
        raise InputError(f"{path} line 1: no question column (expected one of "
                         f"{', '.join(text_columns)}; found: {', '.join(header) or 'nothing'})")
    for where, row in _csv_records(path, reader, out):
        if len(row) > len(header):
            out.unreadable(where, f"{len(row)} fields but the header has {len(header)}")
        elif any(cell.strip() for cell in row):
            yield where, text_key, dict(zip(header, row + [""] * (len(header) - len(row)),
                                            strict=True))


def _csv_records(path: Path, reader: Any, out: Collector) -> Iterator[tuple[str, list[str]]]:
    index = 0
    while True:
        start = reader.line_num + 1
        index += 1
        where = f"{out.name} row {index} (line {start})"
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            out.unreadable(where, f"malformed CSV ({exc})")
            if reader.line_num < start:
                return
            continue
        yield where, row


