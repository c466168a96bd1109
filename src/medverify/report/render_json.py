"""Reports as JSON, written atomically."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from pydantic import ValidationError

from medverify.errors import InputError
from medverify.records import Report

_FILE_MODE = 0o644


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never
    a half-written one: a temporary file in the same directory, fsync, ``os.replace``.

    Creates missing parent directories. The temporary file is removed on failure.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding=encoding, newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, _FILE_MODE)
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    return target


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
