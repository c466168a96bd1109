"""The run store: every run recorded with its config, model ids, prompt versions, KB
snapshot, records, raw outputs and token counts, so that reports and metrics can be
recomputed without calling a model.

The store is a SQLite file (the default) or a PostgreSQL database shared by several
processes or machines, named by a URL (``postgresql://...``;
``medverify.connections`` adapts the few SQL differences, so both run the same
queries and migrations). Schema changes are forward migrations in
``store/migrations/NNNN_name.sql``, applied in order and tracked with
``PRAGMA user_version`` (PostgreSQL: the table ``medverify_schema``). One connection per
store; the pipeline writes from one task (one writer per connection).

:class:`RunStore` holds the connection, migrations and transactions; each table's writer
sits beside its reader in a module of its own: :mod:`medverify.store.run_table` (runs),
:mod:`medverify.store.answers` (answers and claims: reports),
:mod:`medverify.store.flow_tables` (audits, bench replies, fact-checks).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from medverify.connections import (
    Database,
    Dialect,
    PostgresDatabase,
    SqliteDatabase,
    StoreUnavailable,
    dialect_of,
    display,
    sqlite_path,
)
from medverify.errors import MedverifyError
from medverify.store.answers import AnswerTables
from medverify.store.flow_tables import FlowRecordTables
from medverify.store.run_table import RunTable

_MIGRATION = re.compile(r"^(\d{4})_\w+\.sql$")


def migrations() -> list[tuple[int, str]]:
    folder = resources.files("medverify.store") / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text("utf-8")))
    return sorted(found)


class RunStore(RunTable, AnswerTables, FlowRecordTables):
    """The record of runs, in SQLite or PostgreSQL. Use as a context manager or call
    ``close()``.

    ``location`` is a path or a URL (``sqlite:///PATH``, ``postgresql://...``)."""

    def __init__(self, location: Path | str) -> None:
        try:
            dialect = dialect_of(location)
        except ValueError as exc:
            raise MedverifyError(str(exc)) from None
        self.location = display(location)
        self.path: Path | None = sqlite_path(location) if dialect == "sqlite" else None
        if self.path is not None:
            try:
                self._db: Database = SqliteDatabase(self.path, private=True)
                self._migrate()
            except sqlite3.DatabaseError as exc:
                raise MedverifyError(
                    f"cannot open run store {self.path}: {exc}; move it aside to start a new "
                    "one") from exc
            return
        self._db = PostgresDatabase(str(location))
        try:
            self._migrate()
        except StoreUnavailable:
            self._db.close()
            raise
        except self._db.Error as exc:
            self._db.close()
            raise MedverifyError(f"cannot open run store {self.location}: {exc}") from exc

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    @property
    def dialect(self) -> Dialect:
        return self._db.dialect

    @property
    def schema_version(self) -> int:
        return self._db.schema_version()

    def _migrate(self) -> None:
        """Apply the migrations this store lacks, each whole or not at all. Several
        processes may open a new or old store at once (the service's workers): each
        migration is applied once."""
        self._db.migrate(migrations())

    def _transaction(self) -> _Tx:
        return _Tx(self._db)

    @contextmanager
    def immediate(self) -> Iterator[None]:
        """A write transaction that takes the write lock at once, so that what it reads
        cannot change before it writes, in any process (inside a caller's transaction: that
        one). Anything raised inside rolls it back whole."""
        if self._db.in_transaction:
            yield
            return
        self._db.begin(immediate=True)
        try:
            yield
            self._db.commit()
        except BaseException:
            self._db.rollback()
            raise

    def _readable(self) -> _Readable:
        return _Readable(self.location, self._db.Error)


class _Readable:
    """Turns a damaged record or database page met while reading into a MedverifyError (a
    server that cannot be reached is a StoreUnavailable error already)."""

    def __init__(self, path: str, database_error: type[Exception]) -> None:
        self.path = path
        self.database_error = database_error

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        if exc is not None and not isinstance(exc, MedverifyError) and isinstance(
                exc, sqlite3.DatabaseError | self.database_error | ValueError | TypeError
                | AttributeError):
            detail = " ".join(str(exc).split())[:160]
            raise MedverifyError(f"run store {self.path} has a damaged record "
                                 f"({type(exc).__name__}: {detail}); move it aside to start "
                                 "a new one") from None


class _Tx:
    """BEGIN/COMMIT around a block, ROLLBACK on error (connection is in autocommit mode);
    inside a caller's transaction: that one."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._outer = False

    def __enter__(self) -> None:
        self._outer = self._db.in_transaction
        if not self._outer:
            self._db.begin()

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if self._outer or not self._db.in_transaction:
            return
        if exc_type:
            self._db.rollback()
        else:
            self._db.commit()
