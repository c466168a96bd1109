"""Where a benchmark run keeps its records, and how JSONL record files are read back.

A run directory holds everything the study's report is computed from::

    RUN/run.json              BenchManifest (models, question set hash, config, prompts)
    RUN/questions.jsonl       the questions asked (one Question per line)
    RUN/replies.jsonl         one ModelReply per (model, question), appended as they come
    RUN/audit/                the citation audit of the replies (answers.jsonl, ...)
    RUN/question_import.json  how the question file was read (ImportReport)
    RUN/timing.json           wall seconds per phase of the last invocation
    RUN/summary.json          BenchSummary
    RUN/report.html           the study's report
    RUN/exports/              CSV (and Parquet) tables for pandas users
    RUN/labels/               blinded pair samples, their keys and imported human labels

Append-only JSONL files survive a crash: a truncated last line is dropped on reading (and
the file rewritten without it), so appending stays safe and a rerun resumes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from medverify.report.render_json import atomic_write_text

R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True)
class RunLayout:
    """The paths of one run directory."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / "run.json"

    @property
    def questions(self) -> Path:
        return self.root / "questions.jsonl"

    @property
    def replies(self) -> Path:
        return self.root / "replies.jsonl"

    @property
    def audit_dir(self) -> Path:
        return self.root / "audit"

    @property
    def audit_answers(self) -> Path:
        return self.audit_dir / "answers.jsonl"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    @property
    def timing(self) -> Path:
        return self.root / "timing.json"

    @property
    def question_import(self) -> Path:
        """How the question file was read (ImportReport), when the CLI read it."""
        return self.root / "question_import.json"

    @property
    def exports(self) -> Path:
        return self.root / "exports"

    @property
    def labels(self) -> Path:
        return self.root / "labels"

    def exists(self) -> bool:
        return self.manifest.is_file()


def read_records(
    path: Path,
    record: type[R],
    warnings: list[str] | None = None,
    key: Callable[[R], object] | None = None,
    repair: bool = True,
) -> list[R]:
    """The records in a JSONL file, in file order; a missing file is empty.

    With ``key``, the last line per key wins (a redone item replaces the earlier one).
    Unreadable lines are counted in ``warnings``; with ``repair`` the file is rewritten
    without them so that appending to it stays safe.
    """
    if not path.is_file():
        return []
    lines = path.read_text("utf-8", errors="replace").split("\n")
    found: dict[object, R] = {}
    bad = 0
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            item = record.model_validate_json(line)
        except ValueError:
            bad += 1
            continue
        found[key(item) if key else number] = item
    records = list(found.values())
    if bad and warnings is not None:
        warnings.append(f"{path}: {bad} unreadable line(s) dropped (interrupted run?)")
    if repair and bad:
        write_records(path, records)
    elif repair and lines and lines[-1]:
        with path.open("a", encoding="utf-8") as handle:
            handle.write("\n")
    return records


def record_json(record: BaseModel) -> str:
    """``record`` as one line of JSON. Text from models or files may hold lone UTF-16
    surrogates (a JSON ``\\ud83d`` cut in the middle of an emoji): they cannot be written
    as UTF-8, so they become U+FFFD instead of stopping the run."""
    try:
        return record.model_dump_json()
    except PydanticSerializationError:
        return json.dumps(_scrub(record.model_dump(mode="json")), ensure_ascii=False)


def clean_record(record: R) -> R:
    """``record`` itself when it can be written as JSON, else a copy with lone surrogates
    replaced by U+FFFD (see :func:`record_json`)."""
    try:
        record.model_dump_json()
    except PydanticSerializationError:
        return type(record).model_validate_json(record_json(record))
    return record


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    return value


def write_records(path: Path, records: list[R] | tuple[R, ...]) -> None:
    """Write ``records`` as JSONL, atomically."""
    atomic_write_text(path, "".join(record_json(r) + "\n" for r in records))


def append_record(handle: IO[str], record: BaseModel) -> None:
    """Append one record as a JSONL line and flush it to the OS at once."""
    handle.write(record_json(record) + "\n")
    handle.flush()
