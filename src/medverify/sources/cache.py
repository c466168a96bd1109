"""The on-disk fetch cache: one SQLite row per normalised URL, so reruns are free.

Every outcome is stored, failures included, with the status code, a few response
headers, the extracted text, the fetch time and the reason. Online reruns reuse it
except for transient failures (timeouts, connection errors, 429, 5xx, temporary DNS
errors), which are fetched again; offline runs use whatever is there. One connection,
WAL journal, a lock around each statement: safe for many tasks of one process and for
readers in other processes.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from datetime import datetime
from pathlib import Path
from types import TracebackType

from pydantic import BaseModel, Field

from medverify.errors import ConfigError
from medverify.records import FetchFailure, content_hash

log = logging.getLogger("medverify.sources.cache")

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS fetches (
    url TEXT PRIMARY KEY,
    final_url TEXT,
    http_status INTEGER,
    headers TEXT NOT NULL,
    content_type TEXT,
    title TEXT,
    text TEXT,
    truncated INTEGER NOT NULL,
    content_hash TEXT,
    failure TEXT,
    reason TEXT,
    transient INTEGER NOT NULL,
    fetched_at TEXT
)
"""
_COLUMNS = ("url", "final_url", "http_status", "headers", "content_type", "title", "text",
            "truncated", "content_hash", "failure", "reason", "transient", "fetched_at")


class FetchResult(BaseModel):
    """What fetching one URL gave: text on success, ``failure`` + ``reason`` otherwise."""

    url: str
    final_url: str | None = None
    http_status: int | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    content_type: str | None = None
    title: str | None = None
    text: str | None = None
    truncated: bool = False
    content_hash: str | None = None
    failure: FetchFailure | None = None
    reason: str | None = None
    transient: bool = False
    fetched_at: datetime | None = None
    from_cache: bool = False

    @property
    def ok(self) -> bool:
        return self.failure is None and bool(self.text and self.text.strip())


class FetchCache:
    """SQLite store of :class:`FetchResult` keyed by URL (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        try:
            self._setup()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise ConfigError(f"fetch cache {self.path} is unreadable ({exc}): delete it "
                              "or set fetch.cache_path to another file") from None

    def _setup(self) -> None:
        with self._lock, self._db:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(f"schema version {version} is newer than "
                                            f"this medverify ({SCHEMA_VERSION})")
            self._db.execute(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def get(self, url: str) -> FetchResult | None:
        """The stored outcome for ``url`` (with ``from_cache=True``), or None."""
        try:
            with self._lock:
                row = self._db.execute(
                    f"SELECT {', '.join(_COLUMNS)} FROM fetches WHERE url = ?",
                    (url,)).fetchone()
            if row is None:
                return None
            values = dict(zip(_COLUMNS, row, strict=True))
            values["headers"] = json.loads(values["headers"])
            result = FetchResult.model_validate({**values, "from_cache": True})
            if result.text is not None and result.content_hash is not None \
                    and content_hash(result.text) != result.content_hash:
                raise ValueError("the stored text does not match its content hash")
            return result
        except (sqlite3.DatabaseError, ValueError, TypeError) as exc:  # a damaged entry
            log.warning("fetch cache %s: unreadable entry for %s ignored (%s: %s); fetching "
                        "it again", self.path, url, type(exc).__name__, str(exc)[:120])
            return None

    def put(self, result: FetchResult) -> None:
        """Store (or replace) the outcome for ``result.url``."""
        data = result.model_dump(mode="json", exclude={"from_cache"})
        data["headers"] = json.dumps(data["headers"], sort_keys=True)
        marks = ", ".join("?" * len(_COLUMNS))
        with self._lock, self._db:
            self._db.execute(f"INSERT OR REPLACE INTO fetches ({', '.join(_COLUMNS)}) "
                             f"VALUES ({marks})", [data[c] for c in _COLUMNS])

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM fetches").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> FetchCache:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
