"""Stream ClinicalTrials.gov API v2 study records, one at a time.

:func:`iter_studies` takes any mix of

* a ``.json`` file: one study (an API v2 ``GET /studies/{nctId}`` body). A file holding an
  API page (``{"studies": [...], "nextPageToken": ...}``) or a JSON array of studies is
  read too, one study per element (the page is parsed whole: pages are small);
* a ``.jsonl`` / ``.ndjson`` file: one study per line (blank lines ignored);
* a ``.zip`` file: the registry's bulk download, one JSON study per member. Members are
  opened and decompressed one at a time with :mod:`zipfile`; nothing is extracted to disk;
* a directory: every file above inside it, recursively, in sorted path order (other
  files are ignored).

and yields a :class:`Study` per record, holding only that record in memory. Resume:
``skip`` holds NCT ids already done; they are counted as ``skipped`` and not yielded (a
bulk-zip member named ``NCT########.json`` whose id is in ``skip`` is not even
decompressed). The same NCT id seen twice: the first is yielded, the later ones are
counted as ``duplicates`` and dropped (the reader remembers every NCT id it yielded: about
100 bytes an id, so ~50 MB for the whole registry).

One bad record never stops the read. What was wrong is counted in the
:class:`ReadReport` by kind, with a few examples (``"<source>: <message>"``) per kind:

=========================  ================================================  ===========
kind                       what                                              the record
=========================  ================================================  ===========
``unreadable``             the file could not be opened or read (OSError)    dropped
``invalid_json``           not JSON: truncated or malformed                  dropped
``bad_zip``                the zip's directory cannot be read                dropped
``bad_zip_member``         a member fails to decompress (bad CRC, zlib)      dropped
``not_an_object``          the JSON is not an object (e.g. a number)         dropped
``missing_protocol``       no ``protocolSection`` object                     dropped
``missing_nct_id``         no ``identificationModule.nctId`` string          dropped
``non_utf8``               bytes that are not UTF-8, decoded with U+FFFD     kept
``unknown_field``          a top-level field outside :data:`TOP_LEVEL_FIELDS`  kept
``odd_overall_status``     ``statusModule.overallStatus`` not in             kept
                           :data:`OVERALL_STATUSES`
``odd_phase``              a ``designModule.phases`` entry not in            kept
                           :data:`PHASES` (or ``phases`` not a list)
``odd_study_type``         ``designModule.studyType`` not in                 kept
                           :data:`STUDY_TYPES`
=========================  ================================================  ===========

The known sets are the enum values of the API v2 data model (``Status``, ``Phase`` and
``StudyType`` in the ClinicalTrials.gov data-structure reference), which the 7 sample
records agree with; a missing ``overallStatus`` / ``phases`` / ``studyType`` is not
counted (observational studies have no phases). Quality checks (unknown fields, odd
enums) run on records that are yielded, not on skipped or duplicate ones.

A ``source`` says where a record came from: the file path for a ``.json`` file,
``"<path>:<line>"`` for a JSONL line, ``"<zip path>:<member>"`` for a zip member and
``"<path>[<index>]"`` for an element of a page or array file.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "OVERALL_STATUSES",
    "PHASES",
    "STUDY_TYPES",
    "TOP_LEVEL_FIELDS",
    "ReadReport",
    "Study",
    "iter_studies",
]

# Top-level fields of an API v2 study record.
TOP_LEVEL_FIELDS: frozenset[str] = frozenset(
    {
        "protocolSection",
        "resultsSection",
        "annotationSection",
        "documentSection",
        "derivedSection",
        "hasResults",
    }
)
# statusModule.overallStatus (the ``Status`` enum of API v2).
OVERALL_STATUSES: frozenset[str] = frozenset(
    {
        "ACTIVE_NOT_RECRUITING",
        "COMPLETED",
        "ENROLLING_BY_INVITATION",
        "NOT_YET_RECRUITING",
        "RECRUITING",
        "SUSPENDED",
        "TERMINATED",
        "WITHDRAWN",
        "AVAILABLE",
        "NO_LONGER_AVAILABLE",
        "TEMPORARILY_NOT_AVAILABLE",
        "APPROVED_FOR_MARKETING",
        "WITHHELD",
        "UNKNOWN",
    }
)
# designModule.phases entries (the ``Phase`` enum).
PHASES: frozenset[str] = frozenset({"NA", "EARLY_PHASE1", "PHASE1", "PHASE2", "PHASE3", "PHASE4"})
# designModule.studyType (the ``StudyType`` enum).
STUDY_TYPES: frozenset[str] = frozenset({"INTERVENTIONAL", "OBSERVATIONAL", "EXPANDED_ACCESS"})

JSONL_SUFFIXES = frozenset({".jsonl", ".ndjson"})
JSON_SUFFIXES = frozenset({".json"})
ZIP_SUFFIXES = frozenset({".zip"})
_MEMBER_ID = re.compile(r"(NCT\d{8})\.json$")
_MAX_MESSAGE = 300


@dataclass(frozen=True, slots=True)
class Study:
    """One registry record: its NCT id, the parsed JSON object and where it came from."""

    nct_id: str
    data: dict[str, Any]
    source: str


@dataclass
class ReadReport:
    """Counts of one or more :func:`iter_studies` reads (pass the same report to add up).

    ``read``: studies yielded; ``skipped``: dropped because their NCT id was in ``skip``;
    ``duplicates``: dropped because their NCT id was yielded before; ``problems``: count
    per kind (see the module docstring); ``examples``: the first ``max_examples``
    messages per kind, each ``"<source>: <what>"``."""

    read: int = 0
    skipped: int = 0
    duplicates: int = 0
    problems: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    max_examples: int = 10

    def add(self, kind: str, source: str, message: str, *, count: bool = True) -> None:
        """Count one problem of ``kind`` at ``source`` (``count=False``: keep the example
        only)."""
        if count:
            self.problems[kind] = self.problems.get(kind, 0) + 1
        shown = self.examples.setdefault(kind, [])
        if len(shown) < self.max_examples:
            text = f"{source}: {message}"
            if len(text) > _MAX_MESSAGE:
                text = text[: _MAX_MESSAGE - 3] + "..."
            shown.append(text)

    @property
    def dropped(self) -> int:
        """Records dropped for a problem (skipped and duplicate ones not included)."""
        return sum(self.problems.get(kind, 0) for kind in DROPPING_KINDS)

    def as_dict(self) -> dict[str, Any]:
        return {
            "read": self.read,
            "skipped": self.skipped,
            "duplicates": self.duplicates,
            "dropped": self.dropped,
            "problems": dict(sorted(self.problems.items())),
            "examples": {kind: list(msgs) for kind, msgs in sorted(self.examples.items())},
        }

    def summary(self) -> str:
        """One line: the counts, then the problem kinds."""
        line = (
            f"read {self.read}, skipped {self.skipped}, duplicates {self.duplicates}, "
            f"dropped {self.dropped}"
        )
        if self.problems:
            line += "; " + ", ".join(f"{k} {v}" for k, v in sorted(self.problems.items()))
        return line


DROPPING_KINDS = (
    "unreadable",
    "invalid_json",
    "bad_zip",
    "bad_zip_member",
    "not_an_object",
    "missing_protocol",
    "missing_nct_id",
)


def iter_studies(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    skip: set[str] | None = None,
    report: ReadReport | None = None,
) -> Iterator[Study]:
    """Yield every study in ``paths`` (files, directories, JSONL, bulk zips), one at a
    time; see the module docstring for the formats, resume, duplicates and problems."""
    reader = _Reader(skip if skip is not None else set(), report or ReadReport())
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    for path in paths:
        yield from reader.path(Path(path))


class _Reader:
    def __init__(self, skip: set[str], report: ReadReport) -> None:
        self.skip = skip
        self.report = report
        self.seen: set[str] = set()

    # -- containers -------------------------------------------------------------------

    def path(self, path: Path) -> Iterator[Study]:
        if path.is_dir():
            try:
                found = sorted(
                    p for p in path.rglob("*") if p.suffix.lower() in _KNOWN and p.is_file()
                )
            except OSError as exc:
                self.report.add("unreadable", str(path), f"cannot list directory: {exc}")
                return
            for child in found:
                yield from self.file(child)
        else:
            yield from self.file(path)

    def file(self, path: Path) -> Iterator[Study]:
        suffix = path.suffix.lower()
        if suffix in ZIP_SUFFIXES:
            yield from self.zip(path)
        elif suffix in JSONL_SUFFIXES:
            yield from self.jsonl(path)
        else:
            try:
                raw = path.read_bytes()
            except OSError as exc:
                self.report.add("unreadable", str(path), f"cannot read: {exc}")
                return
            yield from self.document(raw, str(path))

    def jsonl(self, path: Path) -> Iterator[Study]:
        try:
            handle = path.open("rb")
        except OSError as exc:
            self.report.add("unreadable", str(path), f"cannot open: {exc}")
            return
        with handle:
            number = 0
            while True:
                try:
                    line = handle.readline()
                except OSError as exc:
                    self.report.add("unreadable", f"{path}:{number + 1}", f"cannot read: {exc}")
                    return
                if not line:
                    return
                number += 1
                if not line.strip():
                    continue
                study = self.record(line, f"{path}:{number}")
                del line
                if study is not None:
                    yield study

    def zip(self, path: Path) -> Iterator[Study]:
        try:
            archive = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile, zlib.error, EOFError, ValueError) as exc:
            self.report.add("bad_zip", str(path), f"not a readable zip: {exc}")
            return
        with archive:
            for info in archive.infolist():
                if info.is_dir():
                    continue
                source = f"{path}:{info.filename}"
                named = _MEMBER_ID.search(info.filename)
                if named and named.group(1) in self.skip:
                    # Resume without decompressing: the bulk zip names members by NCT id.
                    self.report.skipped += 1
                    continue
                try:
                    with archive.open(info) as member:
                        raw = member.read()
                except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as exc:
                    self.report.add("bad_zip_member", source, f"cannot decompress: {exc}")
                    continue
                except NotImplementedError as exc:  # an unsupported compression method
                    self.report.add("bad_zip_member", source, f"unsupported: {exc}")
                    continue
                if info.filename.lower().endswith(tuple(JSONL_SUFFIXES)):
                    for number, line in enumerate(raw.splitlines(), 1):
                        if line.strip():
                            study = self.record(line, f"{source}:{number}")
                            if study is not None:
                                yield study
                    continue
                yield from self.document(raw, source)

    def document(self, raw: bytes, source: str) -> Iterator[Study]:
        """A whole-file JSON document: a study, an API page of studies or an array."""
        text = self.decode(raw, source)
        del raw
        try:
            value = json.loads(text)
        except ValueError as exc:
            self.report.add("invalid_json", source, f"invalid JSON ({_where(exc, text)})")
            return
        del text
        if isinstance(value, dict) and "protocolSection" not in value:
            page = value.get("studies")
            if isinstance(page, list):
                value = page
        if isinstance(value, list):
            for index in range(len(value)):
                item, value[index] = value[index], None  # release each study once yielded
                study = self.study(item, f"{source}[{index}]")
                del item
                if study is not None:
                    yield study
            return
        study = self.study(value, source)
        del value
        if study is not None:
            yield study

    # -- one record -------------------------------------------------------------------

    def record(self, raw: bytes, source: str) -> Study | None:
        text = self.decode(raw, source)
        try:
            value = json.loads(text)
        except ValueError as exc:
            self.report.add("invalid_json", source, f"invalid JSON ({_where(exc, text)})")
            return None
        return self.study(value, source)

    def decode(self, raw: bytes, source: str) -> str:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.report.add(
                "non_utf8", source, f"not UTF-8 at byte {exc.start}; decoded with replacement"
            )
            text = raw.decode("utf-8", errors="replace")
        if text.startswith("\ufeff"):
            text = text[1:]
        return text

    def study(self, value: Any, source: str) -> Study | None:
        report = self.report
        if not isinstance(value, dict):
            report.add("not_an_object", source, f"a JSON {type(value).__name__}, not an object")
            return None
        protocol = value.get("protocolSection")
        if not isinstance(protocol, dict):
            what = "no protocolSection" if protocol is None else "protocolSection not an object"
            report.add("missing_protocol", source, what)
            return None
        ident = protocol.get("identificationModule")
        nct_id = ident.get("nctId") if isinstance(ident, dict) else None
        if not isinstance(nct_id, str) or not nct_id.strip():
            report.add("missing_nct_id", source, "no identificationModule.nctId")
            return None
        nct_id = nct_id.strip()
        if nct_id in self.skip:
            report.skipped += 1
            return None
        if nct_id in self.seen:
            report.duplicates += 1
            # Counted in ``duplicates``, not in ``problems``; an example is kept.
            report.add("duplicate", source, f"{nct_id} seen before; dropped", count=False)
            return None
        self.seen.add(nct_id)
        self.check(value, protocol, source)
        report.read += 1
        return Study(nct_id=nct_id, data=value, source=source)

    def check(self, value: dict[str, Any], protocol: dict[str, Any], source: str) -> None:
        report = self.report
        for name in value:
            if name not in TOP_LEVEL_FIELDS:
                report.add("unknown_field", source, f"unknown top-level field {name!r}")
        status = protocol.get("statusModule")
        if isinstance(status, dict):
            overall = status.get("overallStatus")
            if overall is not None and overall not in OVERALL_STATUSES:
                report.add("odd_overall_status", source, f"overallStatus {overall!r}")
        design = protocol.get("designModule")
        if isinstance(design, dict):
            study_type = design.get("studyType")
            if study_type is not None and study_type not in STUDY_TYPES:
                report.add("odd_study_type", source, f"studyType {study_type!r}")
            phases = design.get("phases")
            if phases is not None:
                if not isinstance(phases, list):
                    report.add("odd_phase", source, f"phases is not a list: {phases!r}")
                else:
                    for phase in phases:
                        if phase not in PHASES:
                            report.add("odd_phase", source, f"phase {phase!r}")


_KNOWN = JSON_SUFFIXES | JSONL_SUFFIXES | ZIP_SUFFIXES


def _where(exc: ValueError, text: str) -> str:
    if isinstance(exc, json.JSONDecodeError):
        end = " at end of input: truncated?" if exc.pos >= len(text.rstrip()) else ""
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}{end}"
    return str(exc)
