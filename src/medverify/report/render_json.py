"""Reports as JSON, written atomically."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from medverify.errors import InputError
from medverify.records import Report

_FILE_MODE = 0o644


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` to write the new file to; on success it replaces
    ``path`` (readers see the old file or the new one, never a half-written one), on
    failure it is removed. Creates missing parent directories."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp_name)
        os.chmod(tmp_name, _FILE_MODE)
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (:func:`atomic_path`), fsynced."""
    with atomic_path(path) as tmp, tmp.open("w", encoding=encoding, newline="") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    return Path(path)


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
