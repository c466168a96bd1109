"""Question sets for benchmark studies: read public question files, keep a canonical JSONL,
sample and merge.

:func:`read_questions` reads generic JSONL/CSV files, our own canonical JSONL and the
public medical question sets (MedicationQA, K-QA, MedLFQA, TREC-2017 LiveQA medical,
MedQuAD) into :class:`~medverify.bench.records.Question` records. Every record read is
counted in the :class:`~medverify.bench.records.ImportReport`: kept, duplicate (same
whitespace/case-normalized text within a source, or an id already used), missing text or
unreadable; repairs (non-UTF-8 lines, row-number prefixes) are reported too. Every
problem message names the file and the line (or CSV row) it is about. Here: the generic
readers, format detection and the canonical files; the public sets' readers are in
:mod:`medverify.bench.question_sets`, decoding and counting in
:mod:`medverify.bench.question_input`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from medverify.bench.question_input import (
    SNIFF_BYTES,
    Collector,
    Decoded,
    csv_rows,
    decode_bytes,
    json_objects,
    pick_key,
)
from medverify.bench.question_sets import (
    read_kqa,
    read_liveqa,
    read_medicationqa,
    read_medlfqa,
    read_medquad,
)
from medverify.bench.records import ImportReport, Question
from medverify.errors import InputError
from medverify.files import clean_record, write_records

FORMATS = ("auto", "jsonl", "csv", "medicationqa", "kqa", "medlfqa", "liveqa", "medquad")

TEXT_KEYS = ("question", "text", "query", "prompt", "question_text")
ID_KEYS = ("id", "qid", "question_id", "uid")
SOURCE_KEYS = ("source",)

_JSONL_SUFFIXES = {".jsonl", ".ndjson", ".json"}
_CSV_SUFFIXES = {".csv", ".tsv"}
_XML_SUFFIXES = {".xml"}
_DIRECTORY_SUFFIXES = {".jsonl", ".ndjson", ".csv", ".tsv", ".xml"}


# -- JSONL ------------------------------------------------------------------------------------


def _canonical(obj: dict[str, Any]) -> Question | None:
    if not {"id", "text", "source"} <= obj.keys() or not obj.keys() <= Question.model_fields.keys():
        return None
    try:
        return Question.model_validate(obj)
    except ValidationError:
        return None


def _read_jsonl(path: Path, decoded: Decoded, source: str | None, out: Collector) -> None:
    for where, obj in json_objects(path, decoded, out):
        question = _canonical(obj)
        if question is not None:
            out.offer(where, question.text, question.source, qid=question.id,
                      reference=question.reference, meta=question.meta)
        else:
            _offer_generic(where, obj, source or path.stem, out)


def _offer_generic(where: str, obj: dict[str, Any], default_source: str,
                   out: Collector) -> None:
    text_key = pick_key(obj, TEXT_KEYS)
    if text_key is None:
        out.missing(where, f"no question field (looked for {', '.join(TEXT_KEYS)})")
        return
    id_key, source_key = pick_key(obj, ID_KEYS), pick_key(obj, SOURCE_KEYS)
    raw_source = obj.get(source_key) if source_key else None
    source = raw_source.strip() if isinstance(raw_source, str) and raw_source.strip() else None
    raw_id = obj.get(id_key) if id_key else None
    qid = str(raw_id).strip() if isinstance(raw_id, (str, int)) and str(raw_id).strip() else None
    meta = {k: v for k, v in obj.items() if k not in (text_key, id_key, source_key)}
    out.offer(where, obj[text_key], source or default_source, qid=qid, meta=meta)


def _read_csv(path: Path, decoded: Decoded, source: str | None, out: Collector) -> None:
    for where, text_key, row in csv_rows(path, decoded, out, TEXT_KEYS):
        obj: dict[str, Any] = {k: v for k, v in row.items() if v.strip() or k == text_key}
        _offer_generic(where, obj, source or path.stem, out)



# -- dispatch ----------------------------------------------------------------------------------

_ROOT_TAG = re.compile(r"<([A-Za-z_][\w.\-]*)")
Reader = Callable[[Path, Decoded, str | None, Collector], None]
_READERS: dict[str, Reader] = {
    "jsonl": _read_jsonl,
    "csv": _read_csv,
    "medicationqa": read_medicationqa,
    "kqa": read_kqa,
    "medlfqa": read_medlfqa,
    "liveqa": read_liveqa,
    "medquad": read_medquad,
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
    body = re.sub(r"<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>]*>", "", text[:SNIFF_BYTES], flags=re.S)
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


def _read_file(path: Path, format: str, source: str | None, out: Collector,
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
    out = Collector(ImportReport(path=str(path), format=format))
    if path.is_dir():
        used, encodings = _read_directory(path, format, source, out)
    else:
        first, encoding = _read_file(path, format, source, out)
        used, encodings = {first}, {encoding}
    out.report.format = "+".join(sorted(used)) or format
    out.report.encoding = "+".join(sorted(encodings)) or "utf-8"
    return [clean_record(q) for q in out.questions], out.report


def _read_directory(root: Path, format: str, source: str | None, out: Collector
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
