"""Question sets for benchmark studies: read public question files, keep a canonical JSONL,
sample and merge.

:func:`read_questions` reads generic JSONL/CSV files, our own canonical JSONL and the
public medical question sets (MedicationQA, K-QA, MedLFQA, TREC-2017 LiveQA medical,
MedQuAD) into :class:`~medverify.bench.records.Question` records. Every record read is
counted in the :class:`~medverify.bench.records.ImportReport`: kept, duplicate (same
whitespace/case-normalized text within a source, or an id already used), missing text or
unreadable; repairs (non-UTF-8 lines, row-number prefixes) are reported too. Every
problem message names the file and the line (or CSV row) it is about.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from medverify.audit.inputs import normalize_url
from medverify.bench.records import ImportReport, Question
from medverify.errors import InputError
from medverify.files import clean_record, write_records
from medverify.records import Document, content_hash

FORMATS = ("auto", "jsonl", "csv", "medicationqa", "kqa", "medlfqa", "liveqa", "medquad")

TEXT_KEYS = ("question", "text", "query", "prompt", "question_text")
ID_KEYS = ("id", "qid", "question_id", "uid")
SOURCE_KEYS = ("source",)

_JSONL_SUFFIXES = {".jsonl", ".ndjson", ".json"}
_CSV_SUFFIXES = {".csv", ".tsv"}
_XML_SUFFIXES = {".xml"}
_DIRECTORY_SUFFIXES = {".jsonl", ".ndjson", ".csv", ".tsv", ".xml"}
_SNIFF_BYTES = 4096


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
    if b"\x00" in raw[:_SNIFF_BYTES]:
        return _decode_utf16(raw, _utf16_without_bom(raw[:_SNIFF_BYTES]))
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


def _collapse(text: str | None) -> str:
    return " ".join((text or "").split())


# -- collecting questions -------------------------------------------------------------------


class _Collector:
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


def _reference(source: str, text: object, url: str | None, *, title: str | None = None,
               doc_source: str | None = None) -> Document | None:
    """The reference answer/document kept with an imported question, when there is one."""
    body = text.strip() if isinstance(text, str) else ""
    url = url.strip() if url and url.strip() else None
    if not body and url is None:
        return None
    digest = content_hash(f"{url or ''}\x00{body}")
    return Document(doc_id=f"{source}:ref:{digest}", text=body, url=url, title=title or None,
                    source=doc_source or source)


def _pick_key(obj: dict[str, Any], candidates: Sequence[str]) -> str | None:
    lowered = {str(key).lower(): key for key in obj}
    for name in candidates:
        if name in lowered:
            return lowered[name]
    return None


# -- JSONL ------------------------------------------------------------------------------------


def _json_objects(path: Path, decoded: Decoded, out: _Collector
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


def _canonical(obj: dict[str, Any]) -> Question | None:
    if not {"id", "text", "source"} <= obj.keys() or not obj.keys() <= Question.model_fields.keys():
        return None
    try:
        return Question.model_validate(obj)
    except ValidationError:
        return None


def _read_jsonl(path: Path, decoded: Decoded, source: str | None, out: _Collector) -> None:
    for where, obj in _json_objects(path, decoded, out):
        question = _canonical(obj)
        if question is not None:
            out.offer(where, question.text, question.source, qid=question.id,
                      reference=question.reference, meta=question.meta)
        else:
            _offer_generic(where, obj, source or path.stem, out)


def _offer_generic(where: str, obj: dict[str, Any], default_source: str,
                   out: _Collector) -> None:
    text_key = _pick_key(obj, TEXT_KEYS)
    if text_key is None:
        out.missing(where, f"no question field (looked for {', '.join(TEXT_KEYS)})")
        return
    id_key, source_key = _pick_key(obj, ID_KEYS), _pick_key(obj, SOURCE_KEYS)
    raw_source = obj.get(source_key) if source_key else None
    source = raw_source.strip() if isinstance(raw_source, str) and raw_source.strip() else None
    raw_id = obj.get(id_key) if id_key else None
    qid = str(raw_id).strip() if isinstance(raw_id, (str, int)) and str(raw_id).strip() else None
    meta = {k: v for k, v in obj.items() if k not in (text_key, id_key, source_key)}
    out.offer(where, obj[text_key], source or default_source, qid=qid, meta=meta)


# -- CSV ----------------------------------------------------------------------------------------


def _csv_rows(path: Path, decoded: Decoded, out: _Collector, text_columns: Sequence[str]
              ) -> Iterator[tuple[str, str, dict[str, str]]]:
    """(where, text column, row) for each data row; InputError without a question column."""
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    reader = csv.reader(io.StringIO(decoded.text, newline=""), delimiter=delimiter)
    header = [cell.strip() for cell in next(reader, [])]
    text_key = _pick_key(dict.fromkeys(header), [c.lower() for c in text_columns])
    if text_key is None:
        raise InputError(f"{path} line 1: no question column (expected one of "
                         f"{', '.join(text_columns)}; found: {', '.join(header) or 'nothing'})")
    for where, row in _csv_records(path, reader, out):
        if len(row) > len(header):
            out.unreadable(where, f"{len(row)} fields but the header has {len(header)}")
        elif any(cell.strip() for cell in row):
            yield where, text_key, dict(zip(header, row + [""] * (len(header) - len(row)),
                                            strict=True))


def _csv_records(path: Path, reader: Any, out: _Collector) -> Iterator[tuple[str, list[str]]]:
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


def _read_csv(path: Path, decoded: Decoded, source: str | None, out: _Collector) -> None:
    for where, text_key, row in _csv_rows(path, decoded, out, TEXT_KEYS):
        obj: dict[str, Any] = {k: v for k, v in row.items() if v.strip() or k == text_key}
        _offer_generic(where, obj, source or path.stem, out)


def _read_medicationqa(path: Path, decoded: Decoded, source: str | None,
                       out: _Collector) -> None:
    source = source or "medicationqa"
    for where, text_key, row in _csv_rows(path, decoded, out, ("Question",)):
        reference = _reference(source, row.get("Answer"), row.get("URL"),
                               title=row.get("Section Title"))
        meta = {_snake(k): v.strip() for k, v in row.items()
                if k not in (text_key, "Answer", "URL") and v.strip()}
        out.offer(where, row[text_key], source, reference=reference, meta=meta)


def _snake(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


# -- K-QA and MedLFQA -----------------------------------------------------------------------------

_URL = re.compile(r"https?://\S+")
_ROW_PREFIX = re.compile(r'\A\d{0,4},\s*"?(?P<text>.*?)"?\s*\Z', re.DOTALL)
_ANSWER_FIELDS = ("Question", "Free_form_answer")


def _read_kqa(path: Path, decoded: Decoded, source: str | None, out: _Collector) -> None:
    _read_answer_records(path, decoded, source or "k-qa", out, strip_row_prefix=False)


def _read_medlfqa(path: Path, decoded: Decoded, source: str | None, out: _Collector) -> None:
    _read_answer_records(path, decoded, source or medlfqa_source(path), out,
                         strip_row_prefix=True)


def medlfqa_source(path: Path) -> str:
    """``healthsearch_qa_test.jsonl`` -> ``healthsearch_qa``; ``live_qa_test_MedLFQA`` ->
    ``live_qa``."""
    name = re.sub(r"(_MedLFQA)?$", "", path.stem, flags=re.IGNORECASE)
    return re.sub(r"_test$", "", name) or path.stem


def _read_answer_records(path: Path, decoded: Decoded, source: str, out: _Collector, *,
                         strip_row_prefix: bool) -> None:
    repaired: list[str] = []
    for where, obj in _json_objects(path, decoded, out):
        text = obj.get("Question")
        meta = {k: v for k, v in obj.items() if k not in _ANSWER_FIELDS}
        if strip_row_prefix and isinstance(text, str):
            match = _ROW_PREFIX.match(text.strip())
            if match and match.group("text").strip():
                meta["original_text"], text = text, match.group("text")
                repaired.append(where.rsplit(" ", 1)[-1])
        urls = [u for u in map(normalize_url, _URL.findall(str(obj.get("Sources") or ""))) if u]
        if urls:
            meta["reference_urls"] = urls
        reference = _reference(source, obj.get("Free_form_answer"), urls[0] if urls else None)
        out.offer(where, text, source, reference=reference, meta=meta)
    if repaired:
        shown = ", ".join(repaired[:5]) + (", ..." if len(repaired) > 5 else "")
        out.note(f"{out.name}: removed a leading row-number prefix (such as '60,') from "
                 f"{len(repaired)} question(s) (lines {shown}); the original is in "
                 "meta['original_text']")


# -- XML: LiveQA and MedQuAD ----------------------------------------------------------------------

_QID_ATTR = re.compile(r'\bqid="([^"]+)"')
_ROOT_TAG = re.compile(r"<([A-Za-z_][\w.\-]*)")


def _parse_xml(path: Path, decoded: Decoded, out: _Collector) -> ET.Element | None:
    try:
        return ET.fromstring(decoded.text)
    except ET.ParseError as exc:
        line = exc.position[0] if exc.position else "?"
        out.unreadable(f"{out.name} line {line}", f"invalid XML ({exc}); whole file skipped")
        return None


def _qid_lines(text: str) -> dict[str, int]:
    lines: dict[str, int] = {}
    line, position = 1, 0
    for match in _QID_ATTR.finditer(text):
        line += text.count("\n", position, match.start())
        position = match.start()
        lines.setdefault(match.group(1), line)
    return lines


def _read_liveqa(path: Path, decoded: Decoded, source: str | None, out: _Collector) -> None:
    source = source or "liveqa"
    root = _parse_xml(path, decoded, out)
    if root is None:
        return
    lines = _qid_lines(decoded.text)
    for index, node in enumerate(root.iter("NLM-QUESTION"), start=1):
        qid = node.get("qid") or str(index)
        where = f"{out.name} line {lines.get(qid, '?')} (question {qid})"
        text, meta = _liveqa_question(node)
        answers = _liveqa_answers(node)
        reference = _reference(source, *answers[0]) if answers else None
        meta.update(qid=qid, reference_urls=[url for _, url in answers if url])
        out.offer(where, text, source, qid=f"{source}:{qid}", reference=reference, meta=meta)


def _liveqa_question(node: ET.Element) -> tuple[str, dict[str, Any]]:
    """The NIST paraphrase, else the NLM summary, else the original subject and message."""
    original = node.find("Original-Question")
    subject = _collapse(original.findtext("SUBJECT")) if original is not None else ""
    message = _collapse(original.findtext("MESSAGE")) if original is not None else ""
    candidates = (("nist_paraphrase", _collapse(node.findtext("NIST-PARAPHRASE"))),
                  ("nlm_summary", _collapse(node.findtext("NLM-Summary"))),
                  ("original", _collapse(f"{subject}. {message}" if subject else message)))
    used, text = next(((name, text) for name, text in candidates if text), ("none", ""))
    meta: dict[str, Any] = {"question_field": used, "subject": subject, "message": message}
    if candidates[1][1]:
        meta["summary"] = candidates[1][1]
    meta["focus"] = [_collapse(f.text) for f in node.iter("FOCUS") if _collapse(f.text)]
    meta["types"] = [_collapse(t.text) for t in node.iter("TYPE") if _collapse(t.text)]
    return text, meta


def _liveqa_answers(node: ET.Element) -> list[tuple[str, str | None]]:
    answers = []
    for ref in node.iter():
        if ref.tag in ("ReferenceAnswer", "RefAnswer"):
            url = _collapse(ref.findtext("AnswerURL")) or None
            answers.append(((ref.findtext("ANSWER") or "").strip(), url))
    return answers


# MedQuAD: <Document id source url> (or <DiseaseFile fid source url>) with <Focus> and
# <QAPair><Question qid qtype/><Answer/>; a few files use <doc docid corpus url>,
# <doctitle-focus> and <pair><question/><answer/>.
_MEDQUAD = {
    "Document": ("source", "Focus", "QAPair", "Question", "Answer"),
    "DiseaseFile": ("source", "Focus", "QAPair", "Question", "Answer"),
    "doc": ("corpus", "doctitle-focus", "pair", "question", "answer"),
}


def _read_medquad(path: Path, decoded: Decoded, source: str | None, out: _Collector) -> None:
    source = source or "medquad"
    root = _parse_xml(path, decoded, out)
    if root is None:
        return
    shape = _MEDQUAD.get(root.tag)
    if shape is None:
        out.unreadable(f"{out.name} line 1", f"XML root <{root.tag}> is not a MedQuAD or "
                       "LiveQA question file; whole file skipped")
        return
    collection_attr, focus_tag, pair_tag, question_tag, answer_tag = shape
    collection = root.get(collection_attr)
    focus = _collapse(root.findtext(focus_tag)) or None
    lines = _qid_lines(decoded.text)
    for index, pair in enumerate(root.iter(pair_tag), start=1):
        node = pair.find(question_tag)
        qid = node.get("qid") if node is not None else None
        where = f"{out.name} line {lines.get(qid or '', '?')} (pair {index})"
        reference = _reference(source, pair.findtext(answer_tag), root.get("url"), title=focus,
                               doc_source=collection)
        meta = {"collection": collection, "focus": focus, "document": path.stem, "qid": qid,
                "qtype": node.get("qtype") if node is not None else None}
        text = _collapse(node.text) if node is not None else None
        out.offer(where, text, source, reference=reference,
                  meta={k: v for k, v in meta.items() if v})


# -- dispatch ----------------------------------------------------------------------------------

Reader = Callable[[Path, Decoded, str | None, _Collector], None]
_READERS: dict[str, Reader] = {
    "jsonl": _read_jsonl,
    "csv": _read_csv,
    "medicationqa": _read_medicationqa,
    "kqa": _read_kqa,
    "medlfqa": _read_medlfqa,
    "liveqa": _read_liveqa,
    "medquad": _read_medquad,
}
_FORMAT_SUFFIXES = {
    "jsonl": _JSONL_SUFFIXES, "kqa": _JSONL_SUFFIXES, "medlfqa": _JSONL_SUFFIXES,
    "csv": _CSV_SUFFIXES, "medicationqa": _CSV_SUFFIXES,
    "liveqa": _XML_SUFFIXES, "medquad": _XML_SUFFIXES,
}


def detect_format(path: Path, decoded: Decoded) -> str:
    """The question format of one file, from its extension, name, columns or root tag."""
    suffix = path.suffix.lower()
    head = decoded.text.lstrip()[:1]
    if suffix in _CSV_SUFFIXES or (suffix not in _JSONL_SUFFIXES | _XML_SUFFIXES
                                   and head not in ("{", "<", "[")):
        return _csv_kind(path, decoded.text)
    if suffix in _XML_SUFFIXES or head == "<":
        return _xml_kind(decoded.text)
    return _jsonl_kind(path, decoded.text)


def _csv_kind(path: Path, text: str) -> str:
    header = text.split("\n", 1)[0]
    if path.name.lower().startswith("medinfo2019") or "Focus (Drug)" in header:
        return "medicationqa"
    return "csv"


def _xml_kind(text: str) -> str:
    body = re.sub(r"<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>]*>", "", text[:_SNIFF_BYTES], flags=re.S)
    match = _ROOT_TAG.search(body)
    root = match.group(1) if match else ""
    return "liveqa" if root.startswith(("LiveQA", "NLM-QUESTION")) else "medquad"


def _jsonl_kind(path: Path, text: str) -> str:
    name = path.name.lower()
    if "medlfqa" in name or name.startswith("healthsearch_qa"):
        return "medlfqa"
    keys = _first_object_keys(text)
    if "Question" in keys and keys & {"ICD_10_diag", "entity_text", "matched_entity"}:
        return "kqa"
    if "Question" in keys and keys & {"Free_form_answer", "Must_have", "Nice_to_have"}:
        return "medlfqa"
    if path.parent.name.lower() in ("k-qa", "kqa") and "Question" in keys:
        return "kqa"
    return "jsonl"


def _first_object_keys(text: str) -> set[str]:
    for line in text.split("\n")[:50]:
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(obj, dict):
            return set(obj)
    return set()


def _read_file(path: Path, format: str, source: str | None, out: _Collector,
               name: str | None = None) -> tuple[str, str]:
    """Read one file into ``out``; returns (format used, encoding)."""
    out.name = name or path.name
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        decoded = decode_bytes(raw)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    for number in decoded.repaired:
        out.report.repaired_encoding += 1
        out.note(f"{out.name} line {number}: not valid UTF-8; decoded as {decoded.fallback}")
    used = detect_format(path, decoded) if format == "auto" else format
    _READERS[used](path, decoded, source, out)
    return used, decoded.encoding


def _directory_files(root: Path, format: str) -> tuple[list[Path], list[Path]]:
    """(question files, other files) under ``root``, sorted; hidden entries are ignored."""
    wanted = _DIRECTORY_SUFFIXES if format == "auto" else _FORMAT_SUFFIXES[format]
    files = sorted(p for p in root.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(root).parts))
    return ([p for p in files if p.suffix.lower() in wanted],
            [p for p in files if p.suffix.lower() not in wanted])


def read_questions(path: Path, *, source: str | None = None, format: str = "auto"
                   ) -> tuple[list[Question], ImportReport]:
    """Read a question file, or every supported file in a directory (recursively).

    ``format`` is one of :data:`FORMATS`; ``auto`` detects it per file. ``source`` names the
    question set (default: the record's ``source`` field for generic files, else the
    format's name, else the file stem). Raises :class:`InputError` for a missing path, an
    unreadable or binary file, an unknown format or a CSV without a question column; in a
    directory such file-level problems are counted as unreadable and reading goes on.
    """
    path = Path(path)
    if format not in FORMATS:
        raise InputError(f"unknown question format {format!r}; use one of {', '.join(FORMATS)}")
    if not path.exists():
        raise InputError(f"no such question file or directory: {path}")
    out = _Collector(ImportReport(path=str(path), format=format))
    if path.is_dir():
        used, encodings = _read_directory(path, format, source, out)
    else:
        first, encoding = _read_file(path, format, source, out)
        used, encodings = {first}, {encoding}
    out.report.format = "+".join(sorted(used)) or format
    out.report.encoding = "+".join(sorted(encodings)) or "utf-8"
    return [clean_record(q) for q in out.questions], out.report


def _read_directory(root: Path, format: str, source: str | None, out: _Collector
                    ) -> tuple[set[str], set[str]]:
    files, others = _directory_files(root, format)
    if not files:
        raise InputError(f"{root}: no question files (.jsonl, .csv, .tsv, .xml) in it")
    used: set[str] = set()
    encodings: set[str] = set()
    for path in files:
        try:
            fmt, encoding = _read_file(path, format, source, out, str(path.relative_to(root)))
        except InputError as exc:
            out.unreadable(str(exc), "whole file skipped")
            continue
        used.add(fmt)
        encodings.add(encoding)
    if others:
        names = ", ".join(str(p.relative_to(root)) for p in others[:5])
        out.note(f"{root}: ignored {len(others)} file(s) that are not question files "
                 f"({names}{', ...' if len(others) > 5 else ''})")
    return used, encodings


# -- canonical files, sampling, merging ----------------------------------------------------------


def write_questions(path: Path, questions: Sequence[Question]) -> None:
    """Write questions as canonical JSONL (one Question per line), atomically."""
    write_records(Path(path), list(questions))


def load_questions(path: Path) -> list[Question]:
    """Read a canonical question file; a line that is not a Question is an InputError."""
    path = Path(path)
    try:
        lines = path.read_text("utf-8-sig").split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read question file {path}: {exc}") from None
    questions = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            questions.append(Question.model_validate_json(line))
        except ValidationError as exc:
            raise InputError(f"{path} line {number}: not a canonical question record "
                             f"({exc.errors()[0]['msg']}); import the file with "
                             "`medverify bench questions import` first") from None
    return questions


def _rank(seed: int, question: Question) -> str:
    return hashlib.sha256(f"{seed}\x00{question.id}".encode()).hexdigest()


def _sample(questions: Sequence[Question], n: int, seed: int) -> list[Question]:
    chosen = {q.id for q in sorted(questions, key=lambda q: _rank(seed, q))[:n]}
    return [q for q in questions if q.id in chosen]


def select_questions(questions: Sequence[Question], *, per_source: int | None = None,
                     limit: int | None = None, seed: int = 0) -> list[Question]:
    """A deterministic random sample: at most ``per_source`` questions of each source, then
    at most ``limit`` in all, in the input order.

    Each question's rank is a hash of (seed, id), so the sample does not depend on the
    order or on other sources, and a larger N selects a superset of a smaller one.
    """
    selected = list(questions)
    if per_source is not None:
        by_source: dict[str, list[Question]] = {}
        for question in selected:
            by_source.setdefault(question.source, []).append(question)
        keep = {q.id for group in by_source.values() for q in _sample(group, per_source, seed)}
        selected = [q for q in selected if q.id in keep]
    if limit is not None:
        selected = _sample(selected, limit, seed)
    return selected


def merge_question_sets(sets: Sequence[list[Question]]) -> tuple[list[Question], int]:
    """All questions of ``sets`` in order, the first of each id kept; returns the merged list
    and the number of duplicates removed."""
    merged: list[Question] = []
    seen: set[str] = set()
    removed = 0
    for questions in sets:
        for question in questions:
            if question.id in seen:
                removed += 1
                continue
            seen.add(question.id)
            merged.append(question)
    return merged, removed
