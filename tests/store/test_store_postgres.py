"""The stores on PostgreSQL (medverify.connections): the dialect translation, the store URL in
the config and the CLI, a server that is down at the start or goes down during a run
(clear error, nothing half-written, resume once it is back), the request cache, and the
service with two worker processes on one database.

The store contract itself (test_store.py, test_review_store.py, test_store_service.py) runs
on both backends through the ``store_location`` fixture; the tests here that need a server
are marked ``database`` (``make test-db``)."""

from __future__ import annotations

import socket
import sys
from collections import Counter
from pathlib import Path

import pytest

from medverify.config import Config
from medverify.connections import (
    POSTGRES_EXTRA,
    StoreUnavailable,
    dialect_of,
    display,
    sqlite_path,
    translate_ddl,
    translate_query,
)
from medverify.errors import ConfigError, MedverifyError
from medverify.llm import Completion, RequestCache, TokenCount
from medverify.records import Answer, Claim, ClaimResult
from medverify.store.runs import RunStore, migrations
from medverify.testing.postgres import PgCluster

# -- the dialect, without a server ------------------------------------------------------


def test_placeholders_become_psycopg_ones_outside_literals() -> None:
    sql = "SELECT '?', x FROM t WHERE a = ? AND b LIKE 'x%' AND c = ?"
    assert translate_query(sql) == (
        "SELECT '?', x FROM t WHERE a = %s AND b LIKE 'x%%' AND c = %s")


def test_ddl_gets_serial_ids_doubles_and_a_rowid_column() -> None:
    script = ("-- a comment; with a semicolon (and a paren\n"
              "CREATE TABLE t (\n  id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
              "  score REAL,  -- a REAL comment)\n  note TEXT DEFAULT '--x;'\n);\n"
              "CREATE INDEX t_score ON t (score DESC);\n"
              "ALTER TABLE t ADD COLUMN more TEXT;")
    create, index, alter = translate_ddl(script)
    assert "id BIGSERIAL PRIMARY KEY" in create and "score DOUBLE PRECISION" in create
    assert "DEFAULT '--x;'" in create and "comment" not in create
    assert create.rstrip().endswith("rowid BIGSERIAL NOT NULL\n)")
    assert index == "CREATE INDEX t_score ON t (score DESC)"
    assert alter == "ALTER TABLE t ADD COLUMN more TEXT"


def test_every_migration_translates() -> None:
    for _, sql in migrations():
        for statement in translate_ddl(sql):
            assert "AUTOINCREMENT" not in statement and ";" not in statement


def test_locations() -> None:
    assert dialect_of(Path("runs.db")) == "sqlite" and dialect_of("runs.db") == "sqlite"
    assert dialect_of("sqlite:////tmp/x/runs.db") == "sqlite"
    assert sqlite_path("sqlite:////tmp/x/runs.db") == Path("/tmp/x/runs.db")
    assert sqlite_path("sqlite:///rel/runs.db") == Path("rel/runs.db")
    assert dialect_of("postgresql://u@h/db") == dialect_of("postgres://h/db") == "postgresql"
    with pytest.raises(ValueError, match="unknown store URL scheme 'mysql'"):
        dialect_of("mysql://h/db")
    assert display("postgresql://u:s3cret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert display("postgresql://u@h/db") == "postgresql://u@h/db"


def test_the_config_and_the_cli_keep_a_store_url(tmp_path: Path) -> None:
    url = "postgresql://mv:pw@db.internal:5432/medverify"
    config = Config.load(None, env={"MEDVERIFY_STORE": url,
                                    "MEDVERIFY_CACHE_PATH": url})
    assert config.store_location == url and config.request_cache_path == url
    with pytest.raises(ConfigError, match="database server"):
        config.store_path  # noqa: B018
    assert config.local_dir == Path(str(tmp_path / "mv-home"))
    again = Config.model_validate_json(config.model_dump_json())  # how the workers get it
    assert again.store_location == url
    plain = Config.load(None, env={"MEDVERIFY_STORE": str(tmp_path / "r.db")})
    assert plain.store_location == tmp_path / "r.db" == plain.store_path
    with pytest.raises(ConfigError):
        Config.load(None, env={"MEDVERIFY_STORE": "mysql://h/db"})

    from click.testing import CliRunner

    from medverify.cli import main

    result = CliRunner().invoke(main, ["runs", "list", "--store",
                                       "postgresql://u@127.0.0.1:1/none"])
    assert result.exit_code != 0
    assert "postgresql://u@127.0.0.1:1/none" in result.output  # the URL, not a mangled path


def test_a_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(MedverifyError, match=r"medverify\[postgres\]"):
        RunStore("postgresql://u@127.0.0.1:1/db")
    assert "medverify[postgres]" in POSTGRES_EXTRA


def test_a_server_that_is_down_at_the_start_is_a_clear_error() -> None:
    pytest.importorskip("psycopg")
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"postgresql://mv:secret@127.0.0.1:{port}/db"
    with pytest.raises(StoreUnavailable) as caught:
        RunStore(url)
    message = str(caught.value)
    assert "cannot connect" in message and "is the server running" in message
    assert "secret" not in message and "mv:***@" in message


# -- on a server ------------------------------------------------------------------------


def _results(n: int) -> list[ClaimResult]:
    return [ClaimResult.failed(Claim(id=f"c{i}", text=f"claim {i}"), "not judged")
            for i in range(n)]


def _saved(store: RunStore, run_id: str) -> dict[int, int]:
    """position: claims stored, for every stored answer of a run."""
    rows = store._db.execute(
        "SELECT a.position, (SELECT COUNT(*) FROM claims c WHERE c.run_id = a.run_id"
        " AND c.position = a.position) FROM answers a WHERE a.run_id = ?", (run_id,)).fetchall()
    return {int(p): int(n) for p, n in rows}


@pytest.mark.database
def test_a_failed_migration_leaves_no_partial_schema(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import medverify.store.runs as runs

    RunStore(pg_url).close()
    bad = [*migrations(), (9999, "CREATE TABLE half (x TEXT); CREATE TABLE broken (;")]
    monkeypatch.setattr(runs, "migrations", lambda: bad)
    with pytest.raises(MedverifyError):
        RunStore(pg_url)
    monkeypatch.undo()
    with RunStore(pg_url) as store:
        assert store.schema_version == migrations()[-1][0]
        assert store._db.execute("SELECT to_regclass('half')").fetchone()[0] is None


@pytest.mark.database
def test_the_server_stopping_mid_run_loses_nothing_and_the_run_resumes(
        pg_cluster: PgCluster, pg_url: str) -> None:
    store = RunStore(pg_url)
    run_id = store.start_run(kind="check", config={}, models={}, prompt_versions={},
                             kb_snapshot=None)
    for position in range(3):
        store.save_answer(run_id, position, Answer(id=f"a{position}", text="t"), _results(5))

    # the server goes away inside a transaction: the half-written answer is not kept
    try:
        with store._transaction():
            store._db.execute(
                "INSERT INTO answers (run_id, position, answer_id, answer, status)"
                " VALUES (?, 3, 'a3', '{}', 'done')", (run_id,))
            pg_cluster.stop("immediate")
            store._db.execute("SELECT 1")
        raise AssertionError("a statement on a stopped server went through")
    except StoreUnavailable as exc:
        assert "rolled back" in str(exc)
    assert not store._db.in_transaction
    # while it is down: every write is a clear error, and nothing is kept
    with pytest.raises(StoreUnavailable, match="is the server running"):
        store.save_answer(run_id, 3, Answer(id="a3", text="t"), _results(5))

    pg_cluster.start()
    assert _saved(store, run_id) == {0: 5, 1: 5, 2: 5}  # the same store reconnects
    done = set(_saved(store, run_id))
    for position in range(5):  # the run resumes where it stopped
        if position not in done:
            store.save_answer(run_id, position, Answer(id=f"a{position}", text="t"),
                              _results(5))
    store.finish_run(run_id, status="done", usage={})
    store.close()
    with RunStore(pg_url) as again:
        info = again.get_run(run_id)
        assert info.status == "done" and info.n_answers == 5 and info.n_claims == 25
        assert _saved(again, run_id) == dict.fromkeys(range(5), 5)


@pytest.mark.database
def test_a_server_restarted_between_calls_is_reconnected_at_once(
        pg_cluster: PgCluster, pg_url: str) -> None:
    with RunStore(pg_url) as store:
        run_id = store.start_run(kind="check", config={}, models={}, prompt_versions={},
                                 kb_snapshot=None)
        pg_cluster.stop("fast")
        pg_cluster.start()
        # the old connection was closed by the shutdown; the statement is sent again
        store.finish_run(run_id, status="done", usage={})
        assert store.get_run(run_id).status == "done"


@pytest.mark.database
def test_the_request_cache_is_shared_and_survives_an_outage(
        pg_cluster: PgCluster, pg_url: str) -> None:
    reply = Completion(text="hello", model="m",
                       usage=TokenCount(prompt_tokens=1, completion_tokens=2))
    one, two = RequestCache(pg_url), RequestCache(pg_url)
    try:
        assert one.enabled and two.enabled and one.get("k") is None
        one.put("k", "prov", reply)
        one.put("k", "prov", reply.model_copy(update={"text": "again"}))
        hit = two.get("k")
        assert hit is not None and hit.cached and hit.text == "again" and two.count() == 1
        pg_cluster.stop("immediate")
        assert two.get("k") is None  # a miss, not an error
        two.put("k2", "prov", reply)  # not kept, not an error
        pg_cluster.start()
        back = two.get("k")
        assert back is not None and back.text == "again"
        assert two.enabled and two.count() == 1
    finally:
        one.close()
        two.close()


@pytest.mark.database
@pytest.mark.timeout(300)
def test_two_service_processes_share_one_database(tmp_path: Path, pg_url: str) -> None:
    """Two ``medverify serve`` processes (two workers each) on one PostgreSQL database: a
    key made by one works on the other, and 24 jobs submitted to both each end once."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    import httpx

    from medverify.kb import KnowledgeBase
    from medverify.records import Document
    from medverify.store.access import KeyStore, Role
    from medverify.testing.faults import cli_env
    from medverify.testing.service import ServiceProcess, wait_until

    kb = tmp_path / "kb"
    with KnowledgeBase.create(kb, embedder="hash") as base:
        base.ingest([Document(doc_id="metformin", title="Metformin",
                              text="Metformin is a first-line medicine for type 2 diabetes.")])
    with RunStore(pg_url) as runs:
        secret = KeyStore(runs).create("client", Role.CLIENT).secret
    auth = {"Authorization": f"Bearer {secret}"}
    env = cli_env(tmp_path / "home", MEDVERIFY_DECOMPOSER="rules")
    answer = {"question": "What is metformin for?",
              "text": "Metformin is a first-line medicine for type 2 diabetes."}
    servers = [ServiceProcess(kb=kb, store=pg_url, home=tmp_path / f"home{i}", workers=2,
                              env=env, log=tmp_path / f"serve{i}.log") for i in range(2)]
    try:
        for server in servers:
            server.start()
        ids: list[str] = []
        for n in range(24):
            with httpx.Client(base_url=servers[n % 2].url, headers=auth, timeout=60) as http:
                response = http.post("/v1/jobs/check", json={"answers": [answer]})
                assert response.status_code == 202, response.text
                ids.append(response.json()["id"])

        def finished() -> bool:
            with RunStore(pg_url) as runs:
                rows = runs._db.execute("SELECT status FROM jobs").fetchall()
            return sum(r[0] in ("done", "failed", "cancelled") for r in rows) == len(ids)

        assert wait_until(finished, 180.0, 0.25)
        with httpx.Client(base_url=servers[1].url, headers=auth, timeout=60) as http:
            states = [http.get(f"/v1/jobs/{job_id}").json() for job_id in ids]
    finally:
        for server in servers:
            server.stop()
    assert Counter(s["status"] for s in states) == {"done": len(ids)}
    with RunStore(pg_url) as runs:
        rows = runs._db.execute("SELECT worker, attempts FROM jobs").fetchall()
    assert all(attempts == 1 for _, attempts in rows)  # each job taken once
    assert len({worker.split(":")[-1] for worker, _ in rows}) >= 2  # by several processes


def test_review_sessions_on_either_backend(store_location: Path | str) -> None:
    from medverify.store.access import KeyStore, Role, SessionStore

    with RunStore(store_location) as store:
        keys, sessions = KeyStore(store), SessionStore(store)
        key = keys.create("reviewer", Role.REVIEWER).key
        session_id, csrf = sessions.create(key.id)
        found = sessions.get(session_id)
        assert found is not None and found.key.id == key.id and found.csrf_token == csrf
        keys.revoke(key.id)
        assert sessions.get(session_id) is None
        assert sessions.delete(session_id) and not sessions.delete(session_id)
