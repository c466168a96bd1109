"""Reports as JSON, written atomically."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from medverify.errors import InputError
from medverify.files import atomic_write_text
from medverify.records import Report


def report_to_json(report: Report) -> str:
    """The report as pretty JSON (indent 2, non-ASCII kept as is, NaN as null)."""
    return report.model_dump_json(indent=2) + "\n"


def write_json(report: Report, path: str | os.PathLike[str]) -> Path:
    """Write the report's JSON to ``path`` atomically; returns the path."""
    return atomic_write_text(path, report_to_json(report))


def read_json(path: str | os.PathLike[str]) -> Report:
    """Load a report written by :func:`write_json`."""
    source = Path(path)
    try:
        return Report.model_validate_json(source.read_bytes())
    except FileNotFoundError as exc:
        raise InputError(f"report file not found: {source}") from exc
    except ValidationError as exc:
        raise InputError(f"{source} is not a medverify report: {exc}") from exc
