"""One connection layer under the stores: SQLite (a file, the default) or PostgreSQL (a
server several processes or machines share), chosen by where the store is.

A location is a path or a URL: ``runs.db``, ``sqlite:///abs/path/runs.db``, or
``postgresql://user:password@host:5432/dbname`` (any libpq URL; ``postgres://`` too).
The stores write one set of queries and one set of migrations, in SQLite's dialect with
``?`` placeholders; :class:`PostgresDatabase` adapts the few differences:

* placeholders: ``?`` becomes ``%s`` (and a literal ``%`` becomes ``%%``);
* upserts: the stores ask :meth:`Database.upsert_sql` / :meth:`Database.insert_ignore_sql`
  (``INSERT OR REPLACE`` / ``OR IGNORE`` in SQLite, ``ON CONFLICT`` in PostgreSQL);
* generated ids: :meth:`Database.insert_id` (``lastrowid``, or ``RETURNING id``);
* DDL: ``INTEGER PRIMARY KEY AUTOINCREMENT`` becomes ``BIGSERIAL PRIMARY KEY``, ``REAL``
  becomes ``DOUBLE PRECISION``, and every table gets a ``rowid BIGSERIAL`` column, so that
  the queries that order by insertion (``ORDER BY rowid``) read the same on both;
* the schema version: ``PRAGMA user_version`` in SQLite, the table ``medverify_schema`` in
  PostgreSQL;
* write locking: SQLite's ``BEGIN IMMEDIATE`` takes the database's one write lock; in
  PostgreSQL :meth:`Database.begin` with ``immediate=True`` takes one transaction-scoped
  advisory lock, so the read-then-write transactions (taking a job, labelling a review
  item) are serialised across processes as they are in SQLite.

A PostgreSQL server that is down, at the start or during a run, is a
:class:`StoreUnavailable` error that says so; a transaction it cut is rolled back by the
server (nothing half-written); the next call reconnects, so work resumes once the server is
back.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import suppress
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit, urlunsplit

from medverify.errors import MedverifyError, MissingDependencyError

Dialect = Literal["sqlite", "postgresql"]

POSTGRES_EXTRA = "pip install 'medverify[postgres]'"
_ADVISORY_LOCK = 0x6D65_6476_7279  # "medvry": the store's one write lock in PostgreSQL


class StoreUnavailable(MedverifyError):
    """The database server of a store cannot be reached (down, or the connection broke)."""


class Cursor(Protocol):
    """What a statement gives back (a DB-API cursor of either driver)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


def is_url(location: str | Path) -> bool:
    return isinstance(location, str) and "://" in location


def dialect_of(location: str | Path) -> Dialect:
    """Which backend a store location names (ValueError for an unknown URL scheme)."""
    if not is_url(location):
        return "sqlite"
    scheme = str(location).split("://", 1)[0].lower()
    if scheme == "sqlite":
        return "sqlite"
    if scheme in ("postgresql", "postgres") or scheme.startswith("postgresql+"):
        return "postgresql"
    raise ValueError(f"unknown store URL scheme {scheme!r}: use a file path, sqlite:///PATH "
                     "or postgresql://USER@HOST:PORT/DBNAME")


def sqlite_path(location: str | Path) -> Path:
    """The file of a SQLite location (a path, or ``sqlite:///path``)."""
    if not is_url(location):
        return Path(location)
    rest = str(location).split("://", 1)[1]
    if not rest.startswith("/"):
        raise ValueError(f"a SQLite URL is sqlite:///PATH (three slashes), not {location!r}")
    # sqlite:///rel/x.db is the relative path rel/x.db; sqlite:////abs/x.db the absolute one
    return Path(rest[1:])


def display(location: str | Path) -> str:
    """A location for messages and logs: a URL's password is masked."""
    text = str(location)
    if not is_url(text):
        return text
    parts = urlsplit(text)
    if parts.password is None:
        return text
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{parts.username or ''}:***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class Database(Protocol):
    """A store's connection: one of :class:`SqliteDatabase`, :class:`PostgresDatabase`."""

    dialect: Dialect
    location: str
    Error: type[Exception]
    IntegrityError: type[Exception]

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    def insert_id(self, sql: str, params: Sequence[Any] = ()) -> int: ...

    def begin(self, immediate: bool = False) -> None: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def schema_version(self) -> int: ...

    def migrate(self, migrations: Sequence[tuple[int, str]]) -> None: ...

    def upsert_sql(self, table: str, columns: Sequence[str], key: Sequence[str]) -> str: ...

    def insert_ignore_sql(self, table: str, columns: Sequence[str]) -> str: ...

    def close(self) -> None: ...


# -- SQLite ----------------------------------------------------------------------------


def _wal(db: sqlite3.Connection, tries: int = 50) -> None:
    """Switch to WAL. Processes opening a new file at once race for this switch, which
    SQLite answers with "locked" at once (no busy wait): retry for up to ~5 s."""
    for attempt in range(tries):
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == tries - 1:
                raise
            time.sleep(0.1)


def create_private_folders(path: Path) -> None:
    """Create each missing folder above ``path`` with mode 0700 (existing ones keep theirs)."""
    for folder in reversed(path.parents):
        if not folder.exists():
            folder.mkdir(mode=0o700, exist_ok=True)
            os.chmod(folder, 0o700)  # mkdir's mode passes through the umask


def create_private(path: Path) -> None:
    """Create ``path`` for a store that holds what others must not read (answers, key
    hashes, the audit log): each missing folder above it with mode 0700, the file itself,
    when missing, empty with mode 0600 (SQLite gives its ``-wal`` and ``-shm`` files the
    mode of the database file). Existing folders and files keep their modes."""
    create_private_folders(path)
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        os.chmod(path, 0o600)


class SqliteDatabase:
    """A SQLite file in autocommit mode (explicit BEGIN/COMMIT), WAL journal, foreign keys
    on. ``raw`` is the sqlite3 connection."""

    dialect: Dialect = "sqlite"
    Error: type[Exception] = sqlite3.Error
    IntegrityError: type[Exception] = sqlite3.IntegrityError

    def __init__(self, path: Path, *, timeout: float = 30.0,
                 check_same_thread: bool = True, foreign_keys: bool = True,
                 private: bool = False) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        if private:  # a new file 0600 in new folders 0700 (create_private)
            create_private(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.raw = sqlite3.connect(self.path, isolation_level=None, timeout=timeout,
                                   check_same_thread=check_same_thread)
        try:
            _wal(self.raw)
            # WAL + NORMAL: a commit does not wait for fsync (a process killed at any point
            # loses nothing committed; a power cut can lose the last commits, never corrupt
            # the file); FULL made every check wait ~4 fsyncs on the event loop
            self.raw.execute("PRAGMA synchronous=NORMAL")
            if foreign_keys:
                self.raw.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error:
            self.raw.close()
            raise

    @property
    def in_transaction(self) -> bool:
        return self.raw.in_transaction

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.raw.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.raw.executemany(sql, rows)

    def insert_id(self, sql: str, params: Sequence[Any] = ()) -> int:
        cursor = self.raw.execute(sql, params)
        assert cursor.lastrowid is not None
        return int(cursor.lastrowid)

    def begin(self, immediate: bool = False) -> None:
        self.raw.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")

    def commit(self) -> None:
        self.raw.execute("COMMIT")

    def rollback(self) -> None:
        if self.raw.in_transaction:
            self.raw.execute("ROLLBACK")

    def schema_version(self) -> int:
        return int(self.raw.execute("PRAGMA user_version").fetchone()[0])

    def migrate(self, migrations: Sequence[tuple[int, str]]) -> None:
        """Apply the migrations this file lacks, each whole or not at all. Several
        processes may open a new or old store at once (the service's workers): a migration
        that fails because another process applied it first is skipped."""
        for version, sql in migrations:
            if version <= self.schema_version():
                continue
            try:
                self.raw.executescript(
                    f"BEGIN IMMEDIATE;\n{sql}\nPRAGMA user_version = {version};\nCOMMIT;")
            except sqlite3.Error:
                if self.raw.in_transaction:
                    self.raw.execute("ROLLBACK")
                if self.schema_version() >= version:
                    continue
                raise

    def upsert_sql(self, table: str, columns: Sequence[str], key: Sequence[str]) -> str:
        marks = ", ".join("?" * len(columns))
        return f"INSERT OR REPLACE INTO {table} ({', '.join(columns)}) VALUES ({marks})"

    def insert_ignore_sql(self, table: str, columns: Sequence[str]) -> str:
        marks = ", ".join("?" * len(columns))
        return f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) VALUES ({marks})"

    def close(self) -> None:
        self.raw.close()


# -- PostgreSQL ------------------------------------------------------------------------


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise MissingDependencyError("psycopg", command=POSTGRES_EXTRA, problem=(
            "a postgresql:// store needs the psycopg driver")) from None
    return psycopg


@lru_cache(maxsize=512)
def translate_query(sql: str) -> str:
    """A query in the stores' dialect (``?`` placeholders) for psycopg: ``?`` outside
    string literals becomes ``%s``, every ``%`` becomes ``%%``."""
    out: list[str] = []
    quoted = False
    for char in sql:
        if char == "'":
            quoted = not quoted
            out.append(char)
        elif char == "%":
            out.append("%%")
        elif char == "?" and not quoted:
            out.append("%s")
        else:
            out.append(char)
    return "".join(out)


_CREATE_TABLE = re.compile(r"^\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?\w+\s*\(",
                           re.IGNORECASE)


def translate_ddl(script: str) -> list[str]:
    """A migration script (SQLite DDL) as PostgreSQL statements (see the module's
    docstring for what changes)."""
    pieces: list[str] = []  # statements, split at semicolons outside literals
    code: list[str] = []
    quoted = comment = False
    for index, char in enumerate(script):
        if comment:
            if char == "\n":
                comment = False
                code.append(char)
        elif char == "'":
            quoted = not quoted
            code.append(char)
        elif char == "-" and not quoted and script[index + 1:index + 2] == "-":
            comment = True
        elif char == ";" and not quoted:
            pieces.append("".join(code))
            code = []
        else:
            code.append(char)
    pieces.append("".join(code))
    statements = []
    for statement in pieces:
        text = statement.strip()
        if not text:
            continue
        text = re.sub(r"\bINTEGER\s+PRIMARY\s+KEY\s+AUTOINCREMENT\b", "BIGSERIAL PRIMARY KEY",
                      text, flags=re.IGNORECASE)
        text = re.sub(r"\bREAL\b", "DOUBLE PRECISION", text)
        if _CREATE_TABLE.match(text) and text.endswith(")"):
            close = len(text) - 1
            text = f"{text[:close].rstrip()},\n    rowid BIGSERIAL NOT NULL\n{text[close:]}"
        statements.append(text)
    return statements


class PostgresDatabase:
    """A PostgreSQL connection in autocommit mode (explicit BEGIN/COMMIT). It reconnects
    on the next call after the server went away; a statement the server refused because it
    was shutting down (so it was not applied) is sent again once, after reconnecting."""

    dialect: Dialect = "postgresql"

    def __init__(self, url: str, *, connect_timeout_s: float = 5.0) -> None:
        self._psycopg = _psycopg()
        self.location = url
        self.Error: type[Exception] = self._psycopg.Error
        self.IntegrityError: type[Exception] = self._psycopg.IntegrityError
        self._connect_timeout = max(1, round(connect_timeout_s))
        self._in_tx = False  # a BEGIN of ours is open
        self._conn: Any = None
        self._connected_once = False
        self._connect()

    def _unavailable(self, what: str, exc: BaseException) -> StoreUnavailable:
        detail = " ".join(str(exc).split())[:240] or type(exc).__name__
        after = (" Nothing of the interrupted write was kept; retry once it is back."
                 if self._connected_once else "")
        return StoreUnavailable(
            f"PostgreSQL store {display(self.location)}: {what} ({detail}); is the server "
            f"running and reachable?{after}")

    def _connect(self) -> None:
        try:
            self._conn = self._psycopg.connect(self.location, autocommit=True,
                                               connect_timeout=self._connect_timeout)
        except self._psycopg.OperationalError as exc:
            self._conn = None
            raise self._unavailable("cannot connect", exc) from None
        self._connected_once = True

    def _live(self) -> Any:
        if self._conn is None or self._conn.closed:
            if self._in_tx:
                self._in_tx = False
                raise StoreUnavailable(
                    f"PostgreSQL store {display(self.location)}: the connection was lost in "
                    "the middle of a transaction, which the server rolled back (nothing of it "
                    "was kept); retry once the server is back")
            self._connect()
        return self._conn

    @property
    def in_transaction(self) -> bool:
        return self._in_tx

    def _run(self, call: Any) -> Any:
        """Run ``call(connection)``; a lost connection becomes StoreUnavailable."""
        conn = self._live()
        in_tx = self._in_tx
        try:
            return call(conn)
        except self._psycopg.OperationalError as exc:
            if not conn.closed:
                raise  # e.g. a lock timeout: the connection is fine
            if in_tx:
                self._in_tx = False
                raise self._unavailable("the connection was lost in a transaction, which "
                                        "the server rolled back", exc) from None
            if exc.sqlstate is None:  # gone without a word: the write may or may not be in
                raise self._unavailable("the connection was lost", exc) from None
        # the server refused the statement (shutting down): not applied, so send it again
        try:
            self._connect()
            return call(self._conn)
        except self._psycopg.OperationalError as exc:
            if self._conn is not None and not self._conn.closed:
                raise
            raise self._unavailable("the connection was lost", exc) from None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        query = translate_query(sql)
        return self._run(lambda conn: conn.execute(query, tuple(params)))  # type: ignore[no-any-return]

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        query = translate_query(sql)
        batch = [tuple(row) for row in rows]
        if batch:
            self._run(lambda conn: conn.cursor().executemany(query, batch))

    def insert_id(self, sql: str, params: Sequence[Any] = ()) -> int:
        row = self.execute(f"{sql} RETURNING id", params).fetchone()
        return int(row[0])

    def begin(self, immediate: bool = False) -> None:
        if self._in_tx:
            raise MedverifyError("a transaction is open already")
        self.execute("BEGIN")
        self._in_tx = True
        if immediate:
            self.execute("SELECT pg_advisory_xact_lock(?)", (_ADVISORY_LOCK,))

    def commit(self) -> None:
        try:
            self.execute("COMMIT")
        finally:
            self._in_tx = False

    def rollback(self) -> None:
        if not self._in_tx:
            return
        self._in_tx = False
        if self._conn is not None and not self._conn.closed:
            # a connection that breaks now: the server rolls the transaction back itself
            with suppress(self._psycopg.OperationalError):
                self._conn.execute("ROLLBACK")

    def schema_version(self) -> int:
        found = self.execute("SELECT to_regclass('medverify_schema')").fetchone()
        if found is None or found[0] is None:
            return 0
        row = self.execute("SELECT MAX(version) FROM medverify_schema").fetchone()
        return int(row[0] or 0)

    def migrate(self, migrations: Sequence[tuple[int, str]]) -> None:
        """Apply the migrations this database lacks, each in one transaction that holds the
        store's write lock (so workers opening it at once apply each exactly once)."""
        for version, sql in migrations:
            if version <= self.schema_version():
                continue
            self.begin(immediate=True)
            try:
                self.execute("CREATE TABLE IF NOT EXISTS medverify_schema"
                             " (version INTEGER NOT NULL)")
                if version > self.schema_version():
                    for statement in translate_ddl(sql):
                        self.execute(statement)
                    self.execute("DELETE FROM medverify_schema")
                    self.execute("INSERT INTO medverify_schema (version) VALUES (?)",
                                 (version,))
                self.commit()
            except BaseException:
                self.rollback()
                raise

    def upsert_sql(self, table: str, columns: Sequence[str], key: Sequence[str]) -> str:
        marks = ", ".join("?" * len(columns))
        updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key)
        return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
                f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}")

    def insert_ignore_sql(self, table: str, columns: Sequence[str]) -> str:
        marks = ", ".join("?" * len(columns))
        return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
                " ON CONFLICT DO NOTHING")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def connect(location: str | Path, *, timeout: float = 30.0,
            check_same_thread: bool = True) -> SqliteDatabase | PostgresDatabase:
    """Open the database a store location names (see the module's docstring)."""
    if dialect_of(location) == "postgresql":
        return PostgresDatabase(str(location), connect_timeout_s=min(timeout, 10.0))
    return SqliteDatabase(sqlite_path(location), timeout=timeout,
                          check_same_thread=check_same_thread)
