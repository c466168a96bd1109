from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from medverify.errors import MedverifyError
from medverify.records import (
    Analysis,
    Answer,
    Category,
    Claim,
    ClaimResult,
    Passage,
    Usage,
    Verdict,
)
from medverify.store.runs import RunStore, migrations
from postgres_server import as_location, fresh_location
from process_context import racing_context


def _results() -> list[ClaimResult]:
    passage = Passage(id="d1#0", doc_id="d1", text="Aspirin inhibits platelets.")
    good = Verdict(
        claim_id="c1",
        passage_ids=["d1#0"],
        judge="llm:fake:x",
        prompt_version="judge/v1",
        factual=Analysis(holds=True, passage_id="d1#0", quote="inhibits platelets"),
        counterfactual=Analysis(holds=False),
        raw_output='{"results": []}',
    )
    bad = Verdict(claim_id="c2", passage_ids=["d1#0"], judge="llm:fake:x", error="unparseable")
    return [
        ClaimResult.from_verdict(
            Claim(id="c1", text="Aspirin inhibits platelets."), [passage], good
        ),
        ClaimResult.from_verdict(Claim(id="c2", text="Aspirin cures flu."), [passage], bad),
        ClaimResult.failed(Claim(id="c3", text="x"), "judge returned no verdict"),
    ]


def test_round_trip_recomputes_report(store_location: Path | str) -> None:
    with RunStore(store_location) as store:
        run_id = store.start_run(
            kind="check",
            config={"top_k": 7},
            models={"judge": "fake:x"},
            prompt_versions={"judge": "judge/v1"},
            kb_snapshot="snap1",
        )
        answer = Answer(text="Aspirin inhibits platelets. Aspirin cures flu.", question="q")
        notes = {"judge.cascade": {"settled_by_builtin": 1, "model_calls_saved": 1}}
        store.save_answer(run_id, 0, answer, _results(), notes=notes)
        store.finish_run(run_id, status="done", usage={"judge": Usage(calls=1, prompt_tokens=10)})
    with RunStore(store_location) as store:
        [info] = store.list_runs()
        assert info.status == "done" and info.n_claims == 3 and info.n_answers == 1
        assert info.usage["judge"].prompt_tokens == 10
        [report] = store.reports(run_id[:12])
    assert report.kb_snapshot == "snap1" and report.prompt_versions == {"judge": "judge/v1"}
    assert [r.category for r in report.results] == [Category.FACT, Category.ERROR, Category.ERROR]
    assert report.results[0].evidence_quote == "inhibits platelets"
    assert report.results[1].verdict is not None and report.results[1].error == "unparseable"
    assert report.metrics.n_scored == 1 and report.metrics.n_errors == 2
    assert report.metrics.statement_support == 1.0
    assert report.notes == notes


def test_a_version_1_store_is_migrated_and_keeps_its_answers(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    db = sqlite3.connect(path)
    db.executescript(migrations()[0][1] + "\nPRAGMA user_version = 1;")
    db.execute("INSERT INTO runs VALUES ('r1', 'check', 'done', '2026-01-01T00:00:00+00:00',"
               " NULL, '0.1.0', '{}', '{}', '{}', NULL, '{}', NULL)")
    db.execute("INSERT INTO answers VALUES ('r1', 0, 'a1', ?, 'done', NULL)",
               (Answer(id="a1", text="t").model_dump_json(),))
    db.commit()
    db.close()
    with RunStore(path) as store:
        assert store.schema_version == migrations()[-1][0]
        [report] = store.reports("r1")
    assert report.answer.id == "a1" and report.notes == {}


def test_resaving_an_answer_replaces_its_claims(store_location: Path | str) -> None:
    with RunStore(store_location) as store:
        run_id = store.start_run(
            kind="check", config={}, models={}, prompt_versions={}, kb_snapshot=None
        )
        answer = Answer(text="t")
        store.save_answer(run_id, 0, answer, _results())
        store.save_answer(run_id, 0, answer, _results()[:1])
        assert store.get_run(run_id).n_claims == 1


def test_migrations_are_recorded_and_idempotent(store_location: Path | str) -> None:
    path = store_location
    RunStore(path).close()
    with RunStore(path) as store:
        assert store.schema_version == migrations()[-1][0]


def test_unknown_or_ambiguous_run(store_location: Path | str) -> None:
    with RunStore(store_location) as store:
        for n in range(2):
            store.start_run(
                kind="check", config={}, models={}, prompt_versions={}, kb_snapshot=str(n)
            )
        with pytest.raises(MedverifyError, match="no run matching"):
            store.get_run("nope")
        with pytest.raises(MedverifyError, match="2 runs matching"):
            store.get_run("")


def test_corrupt_store_gives_actionable_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(MedverifyError, match="move it aside"):
        RunStore(path)


def test_failed_migration_leaves_no_partial_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import medverify.store.runs as runs

    bad = [*migrations(), (9999, "CREATE TABLE half (x); CREATE TABLE broken (;")]
    monkeypatch.setattr(runs, "migrations", lambda: bad)
    with pytest.raises(MedverifyError):
        RunStore(tmp_path / "runs.db")
    db = sqlite3.connect(tmp_path / "runs.db")
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
    assert "half" not in names and "runs" in names
    assert db.execute("PRAGMA user_version").fetchone()[0] == migrations()[-1][0]


def test_a_run_whose_process_was_killed_is_told_apart_and_recorded_as_interrupted(
        store_location: Path | str) -> None:
    import socket

    from medverify.store.run_table import current_process

    with RunStore(store_location) as store:
        alive = store.start_run(kind="check", config={}, models={}, prompt_versions={},
                                kb_snapshot=None)
        dead = store.start_run(kind="check", config={}, models={}, prompt_versions={},
                               kb_snapshot=None)
        store._db.execute("UPDATE runs SET process = ? WHERE id = ?",
                          (f"{socket.gethostname()}:999999999", dead))
        infos = {i.id: i for i in store.list_runs()}
        assert infos[alive].process == current_process() and not infos[alive].process_gone
        assert infos[dead].process_gone
        assert store.interrupt_orphans() == 1
        after = {i.id: i for i in store.list_runs()}
    assert after[alive].status == "running"
    assert after[dead].status == "interrupted" and "stopped while running" in after[dead].error


def _open_store(path: str, barrier: Any, results: Any) -> None:
    barrier.wait()
    try:
        RunStore(as_location(path)).close()
        results.put("ok")
    except Exception as exc:  # reported to the test, which fails on it
        results.put(repr(exc))


def test_workers_opening_a_new_store_at_once_all_succeed(
        store_location: Path | str, request: pytest.FixtureRequest) -> None:
    """The service's workers create and migrate one store together: each migration is
    applied once, and the switch to WAL is retried while another process holds it."""

    context = racing_context()
    for trial in range(3):
        path = str(fresh_location(store_location, trial, request))
        barrier, results = context.Barrier(4), context.Queue()
        workers = [context.Process(target=_open_store, args=(path, barrier, results))
                   for _ in range(4)]
        for worker in workers:
            worker.start()
        outcomes = [results.get(timeout=60) for _ in workers]
        for worker in workers:
            worker.join(60)
        assert outcomes == ["ok"] * 4
        with RunStore(as_location(path)) as store:
            assert store.schema_version == len(migrations())
