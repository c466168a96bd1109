"""Persistent request cache: one SQLite file, or a table in a PostgreSQL database that
several processes or machines share (a ``postgresql://`` URL, docs/scale.md); key =
``ChatRequest.cache_key(provider_id)``.

Only successful completions are stored (a reply over ``[llm] max_reply_bytes`` is an error,
so never stored; an entry over the cap left from before it is a miss, not loaded). The cache
is safe for concurrent use from one process (one connection guarded by a lock; WAL mode lets
other processes read meanwhile).
A cache file that cannot be opened or read is never fatal: a warning is logged and the run
continues without a cache. A PostgreSQL server that is down is a miss (and a put not kept)
until it is back, with a warning.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from medverify.connections import PostgresDatabase, StoreUnavailable, dialect_of, display
from medverify.llm.base import Completion

log = logging.getLogger("medverify.llm.cache")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS completions (
    key TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    completion TEXT NOT NULL,
    created_at TEXT NOT NULL,
    sha256 TEXT
)
"""


_COLUMNS = ("key", "provider", "completion", "created_at", "sha256")


def _digest(payload: str) -> str:
    """The checksum stored beside a completion: SQLite keeps none of cell contents, so a
    byte flipped inside a stored reply would otherwise read back as a valid, wrong reply."""
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class RequestCache:
    """Completions by request key. ``enabled`` is False when the file was unusable."""

    def __init__(self, path: Path | str) -> None:
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._server: PostgresDatabase | None = None
        self._server_down = False
        if dialect_of(path) == "postgresql":
            self.path: Path | str = display(path)
            self._open_server(str(path))
            return
        self.path = Path(path)
        try:
            self._conn = self._open()
        except (sqlite3.Error, OSError) as exc:
            self._disable(exc)

    def _open_server(self, url: str) -> None:
        try:
            server = PostgresDatabase(url)
        except StoreUnavailable as exc:  # down now: no cache for this process
            self._disable(exc)
            return
        try:
            server.execute(_SCHEMA)
        except server.Error as exc:
            server.close()
            self._disable(exc)
            return
        self._server = server

    def _server_failed(self, exc: Exception) -> None:
        """A server call failed: down (a miss, said once until it is back) or broken."""
        if isinstance(exc, StoreUnavailable):
            if not self._server_down:
                log.warning("request cache %s: %s; calls go uncached until it is back",
                            self.path, exc)
            self._server_down = True
            return
        self._disable(exc)

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(completions)")}
            if "sha256" not in columns:  # a cache written before checksums: rows without
                conn.execute("ALTER TABLE completions ADD COLUMN sha256 TEXT")  # one pass
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
        if self._server is not None:
            self._server.close()
        self._server = None

    @property
    def enabled(self) -> bool:
        return self._conn is not None or self._server is not None

    def get(self, key: str, *, max_chars: int | None = None) -> Completion | None:
        """The cached completion for ``key`` (marked ``cached=True``), or None. An entry
        longer than ``max_chars`` (stored before a reply cap, ``[llm] max_reply_bytes``) is
        a miss, and is not read into memory."""
        row = self._fetch(key, max_chars)
        if row is None:
            return None
        payload, digest = row
        if payload is None:
            log.warning("request cache %s: entry %s is over %s characters; asked again",
                        self.path, key[:12], f"{max_chars:,}")
            return None
        try:
            if not isinstance(payload, str) or (digest is not None and _digest(payload) != digest):
                raise ValueError("the stored reply does not match its checksum")
            completion = Completion.model_validate_json(payload)
        except (ValidationError, ValueError):
            log.warning("request cache %s: unreadable entry %s ignored (damaged, or not a "
                        "stored reply)", self.path, key[:12])
            return None
        return completion.model_copy(update={"cached": True})

    def _fetch(self, key: str, max_chars: int | None = None,
               ) -> tuple[object, str | None] | None:
        """(payload, checksum) of ``key``; the payload None when over ``max_chars``."""
        sql = "SELECT completion, sha256 FROM completions WHERE key = ?"
        params: tuple[object, ...] = (key,)
        if max_chars is not None:
            sql = ("SELECT CASE WHEN length(completion) <= ? THEN completion END, sha256 "
                   "FROM completions WHERE key = ?")
            params = (max_chars, key)
        with self._lock:
            if self._server is not None:
                try:
                    row = self._server.execute(sql, params).fetchone()
                    self._server_down = False
                except (StoreUnavailable, self._server.Error) as exc:
                    self._server_failed(exc)
                    return None
                return (row[0], row[1]) if row else None
            if self._conn is None:
                return None
            try:
                row = self._conn.execute(sql, params).fetchone()
            except sqlite3.Error as exc:
                self._disable(exc)
                return None
        return (row[0], row[1]) if row else None

    def put(self, key: str, provider_id: str, completion: Completion) -> None:
        """Store a successful completion (stored with ``cached=False``)."""
        payload = completion.model_copy(update={"cached": False}).model_dump_json()
        now = datetime.now(UTC).isoformat()
        with self._lock:
            if self._server is not None:
                try:
                    self._server.execute(
                        self._server.upsert_sql("completions", _COLUMNS, ("key",)),
                        (key, provider_id, payload, now, _digest(payload)))
                    self._server_down = False
                except (StoreUnavailable, self._server.Error) as exc:
                    self._server_failed(exc)
                return
            if self._conn is None:
                return
            try:
                with self._conn:
                    self._conn.execute(
                        "INSERT OR REPLACE INTO completions (key, provider, completion, "
                        "created_at, sha256) VALUES (?, ?, ?, ?, ?)",
                        (key, provider_id, payload, now, _digest(payload)))
            except sqlite3.Error as exc:
                self._disable(exc)

    def count(self) -> int:
        """Number of stored completions (0 when disabled)."""
        with self._lock:
            if self._server is not None:
                try:
                    row = self._server.execute("SELECT COUNT(*) FROM completions").fetchone()
                    return int(row[0])
                except (StoreUnavailable, self._server.Error) as exc:
                    self._server_failed(exc)
                    return 0
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
            if self._server is not None:
                self._server.close()
                self._server = None

    def __repr__(self) -> str:
        state = "enabled" if self.enabled else "disabled"
        return f"RequestCache({str(self.path)!r}, {state})"
