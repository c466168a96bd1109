"""The ``database`` test fixtures: a throwaway PostgreSQL server for the session
(medverify.testing.postgres), a new database per test, and ``store_location``, which runs a
store test on SQLite and on PostgreSQL. They skip, with the reason, when the server binaries
or the psycopg driver are missing. Imported by conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from medverify.testing.postgres import PgCluster, find_bin, start_cluster


def _skip_reason() -> str | None:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'medverify[postgres]')"
    if find_bin() is None:
        return "PostgreSQL is not installed (Debian: apt-get install postgresql)"
    return None


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """One throwaway server for the session."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    try:
        cluster = start_cluster()
    except RuntimeError as exc:
        pytest.skip(f"cannot start a throwaway PostgreSQL: {exc}")
    try:
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> str:
    """The URL of a new, empty store on the session's server (a schema of its own)."""
    if not _running(pg_cluster):  # a fault test left it stopped
        pg_cluster.start()
    return pg_cluster.create_schema()


def _running(cluster: PgCluster) -> bool:
    result = cluster._run("pg_ctl", "-D", str(cluster.data), "status", check=False)
    return result.returncode == 0


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.database)])
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a store test opens its store: a SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return tmp_path / "runs.db"
    return str(request.getfixturevalue("pg_url"))


def as_location(text: str) -> Path | str:
    """A store location passed to a child process as text, back as a path or URL."""
    return text if "://" in text else Path(text)


def fresh_location(like: Path | str, n: int, request: pytest.FixtureRequest) -> Path | str:
    """Another new, empty store of the same backend as ``like``."""
    if isinstance(like, Path):
        return like.with_name(f"runs{n}.db")
    return request.getfixturevalue("pg_cluster").create_schema()  # type: ignore[no-any-return]
