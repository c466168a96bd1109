"""Persistent request cache: one SQLite file, key = ``ChatRequest.cache_key(provider_id)``.

Only successful completions are stored. The cache is safe for concurrent use from one
process (one connection guarded by a lock; WAL mode lets other processes read meanwhile).
A cache file that cannot be opened or read is never fatal: a warning is logged and the run
continues without a cache.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from medverify.llm.base import Completion

log = logging.getLogger("medverify.llm.cache")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS completions (
    key TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    completion TEXT NOT NULL,
    created_at TEXT NOT NULL
)
"""


class RequestCache:
    """Completions by request key. ``enabled`` is False when the file was unusable."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        try:
            self._conn = self._open()
        except (sqlite3.Error, OSError) as exc:
            self._disable(exc)

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
            conn.execute("SELECT key FROM completions LIMIT 1").fetchall()
            conn.commit()
        except sqlite3.Error:
            conn.close()
            raise
        return conn

    def _disable(self, exc: BaseException) -> None:
        log.warning("request cache %s is unusable (%s); continuing without a cache "
                    "(delete the file to rebuild it)", self.path, exc)
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    @property
    def enabled(self) -> bool:
        return self._conn is not None

    def get(self, key: str) -> Completion | None:
        """The cached completion for ``key`` (marked ``cached=True``), or None."""
        row = self._fetch(key)
        if row is None:
            return None
        try:
            completion = Completion.model_validate_json(row)
        except ValidationError:
            log.warning("request cache %s: unreadable entry %s ignored", self.path, key[:12])
            return None
        return completion.model_copy(update={"cached": True})

    def _fetch(self, key: str) -> str | None:
        with self._lock:
            if self._conn is None:
                return None
            try:
                row = self._conn.execute(
                    "SELECT completion FROM completions WHERE key = ?", (key,)).fetchone()
            except sqlite3.Error as exc:
                self._disable(exc)
                return None
        return row[0] if row else None

    def put(self, key: str, provider_id: str, completion: Completion) -> None:
        """Store a successful completion (stored with ``cached=False``)."""
        payload = completion.model_copy(update={"cached": False}).model_dump_json()
        now = datetime.now(UTC).isoformat()
        with self._lock:
            if self._conn is None:
                return
            try:
                with self._conn:
                    self._conn.execute(
                        "INSERT OR REPLACE INTO completions VALUES (?, ?, ?, ?)",
                        (key, provider_id, payload, now))
            except sqlite3.Error as exc:
                self._disable(exc)

    def count(self) -> int:
        """Number of stored completions (0 when disabled)."""
        with self._lock:
            if self._conn is None:
                return 0
            try:
                return int(self._conn.execute("SELECT COUNT(*) FROM completions").fetchone()[0])
            except sqlite3.DatabaseError as exc:
                log.warning("request cache %s is unreadable (%s): counted as empty", self.path,
                            exc)
                return 0

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __repr__(self) -> str:
        state = "enabled" if self.enabled else "disabled"
        return f"RequestCache({str(self.path)!r}, {state})"
