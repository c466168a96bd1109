"""Files medverify writes and reads back: atomic writes and JSONL record files.

The bottom layer: it imports nothing from medverify but errors, so every package may use it.
A file is replaced atomically (temp file + rename: readers see the old file or the new one,
never half of one); JSONL record files are appended a line at a time and survive a crash: a
truncated last line is dropped on reading and the file rewritten without it, so appending
stays safe and a rerun resumes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

R = TypeVar("R", bound=BaseModel)

_FILE_MODE = 0o644
DATA_ENV = "MEDVERIFY_DATA"
"""Names the folder of real, human-labelled data (``../shared/data`` in a development
checkout; end users do not have it). Not a setting: only tools, tests and benchmarks read it."""


def data_dir() -> Path:
    """The real-data folder: ``$MEDVERIFY_DATA`` (a relative value is taken from the
    working directory), else ``../shared/data`` beside the source checkout. It may not
    exist: callers that need a file from it say which one is missing."""
    value = os.environ.get(DATA_ENV, "").strip()
    if value:
        return Path(value).expanduser()
    return Path(__file__).resolve().parents[3] / "shared" / "data"


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


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A staging directory beside ``path`` to fill; on success it replaces ``path`` (an
    existing directory there is removed first), on failure it is removed, so a killed
    writer never leaves a half-written directory at ``path``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield staging
        staging.chmod(0o755)  # mkdtemp makes it private
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (:func:`atomic_path`), fsynced."""
    with atomic_path(path) as tmp, tmp.open("w", encoding=encoding, newline="") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    return Path(path)


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


def read_json_record(path: Path, record: type[R], what: str) -> R | None:
    """The record saved as JSON at ``path`` (None when there is no file); a file that is
    not a readable ``record`` is a ConfigError that says how to go on."""
    from pydantic import ValidationError

    from medverify.errors import ConfigError

    if not path.is_file():
        return None
    try:
        return record.model_validate_json(path.read_text("utf-8"))
    except (ValidationError, ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not a readable {what} ({exc}); start over with --fresh "
                          "or use another run directory") from None


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks."""
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
