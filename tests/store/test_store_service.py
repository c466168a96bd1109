"""The service's state in the run store: API keys, the audit log and the job queue."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import medverify.store.access as access
from medverify.connections import SqliteDatabase
from medverify.errors import MedverifyError
from medverify.store.access import AuditLog, KeyNotFound, KeyStore, Role
from medverify.store.jobs import JobKind, JobNotFound, JobStatus, JobStore
from medverify.store.runs import RunStore, migrations
from postgres_server import as_location
from process_context import racing_context


@pytest.fixture
def store(store_location: Path | str):
    with RunStore(store_location) as runs:
        yield runs


# ----------------------------------------------------------------------- keys


def test_a_created_key_verifies_and_only_its_hash_is_stored(store: RunStore) -> None:
    keys = KeyStore(store)
    new = keys.create("ci bot", Role.REVIEWER)
    assert new.secret.startswith(f"mvk_{new.key.id}_") and len(new.key.id) == 12
    int(new.key.id, 16)
    assert new.key.role is Role.REVIEWER and new.key.name == "ci bot"
    [(stored,)] = store._db.execute("SELECT secret_sha256 FROM api_keys").fetchall()
    assert stored == hashlib.sha256(new.secret.encode()).hexdigest()
    if isinstance(store._db, SqliteDatabase):
        dump = "\n".join(store._db.raw.iterdump())
    else:
        dump = "\n".join(str(row) for row in store._db.execute("SELECT * FROM api_keys"))
    assert new.secret not in dump and new.secret.split("_", 2)[2] not in dump
    info = keys.verify(new.secret)
    assert info is not None and info.id == new.key.id and info.role is Role.REVIEWER
    assert keys.get(new.key.id).last_used_at is not None
    assert [k.id for k in keys.list()] == [new.key.id]


def test_two_keys_differ_and_a_role_can_be_named(store: RunStore) -> None:
    keys = KeyStore(store)
    a, b = keys.create("a"), keys.create("b", "admin")
    assert a.key.id != b.key.id and a.secret != b.secret
    assert a.key.role is Role.CLIENT and b.key.role is Role.ADMIN
    assert [k.name for k in keys.list()] == ["a", "b"]
    with pytest.raises(MedverifyError, match="needs a name"):
        keys.create("  ")
    with pytest.raises(ValueError):
        keys.create("x", "root")


def test_wrong_malformed_and_unknown_secrets_are_refused(store: RunStore) -> None:
    keys = KeyStore(store)
    new = keys.create("a")
    other = keys.create("b")
    prefix, token = new.secret[: len("mvk_") + 13], new.secret[len("mvk_") + 13 :]
    flipped = token[:-1] + ("A" if token[-1] != "A" else "B")
    for bad in [
        prefix + flipped,                                   # wrong token
        f"mvk_{new.key.id}_" + other.secret.split("_", 2)[2],  # another key's token
        f"mvk_{'0' * 12}_{token}",                          # unknown id
        "", "mvk_", "mvk__", f"mvk_{new.key.id}", new.secret + " ", " " + new.secret,
        new.secret.upper(), f"Bearer {new.secret}", "mvk_xyz_" + token,
        f"mvk_{new.key.id}_{token}\n", "x" * 10_000,
    ]:
        assert keys.verify(bad) is None, bad
    assert keys.get(new.key.id).last_used_at is None


def test_a_revoked_key_stops_working_and_revoking_is_idempotent(store: RunStore) -> None:
    keys = KeyStore(store)
    new = keys.create("a")
    assert keys.verify(new.secret) is not None
    first = keys.revoke(new.key.id)
    assert first.revoked_at is not None
    assert keys.verify(new.secret) is None
    assert keys.revoke(new.key.id).revoked_at == first.revoked_at
    with pytest.raises(KeyNotFound, match="keys list"):
        keys.revoke("000000000000")
    with pytest.raises(KeyNotFound):
        keys.get("nope")
    assert issubclass(KeyNotFound, MedverifyError)


def test_a_revocation_is_seen_by_another_connection(store_location: Path | str) -> None:
    with RunStore(store_location) as one, RunStore(store_location) as two:
        new = KeyStore(one).create("a")
        assert KeyStore(two).verify(new.secret) is not None
        KeyStore(one).revoke(new.key.id)
        assert KeyStore(two).verify(new.secret) is None


def test_last_used_is_written_at_most_once_a_minute(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeyStore(store)
    new = keys.create("a")
    clock = [datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)]
    monkeypatch.setattr(access, "_now", lambda: clock[0])
    if not isinstance(store._db, SqliteDatabase):
        pytest.skip("counts the statements with SQLite's trace callback")
    writes = []
    store._db.raw.set_trace_callback(lambda sql: writes.append(sql) if "UPDATE" in sql else None)
    assert keys.verify(new.secret) is not None
    for seconds in (1, 30, 59):
        clock[0] = datetime(2026, 3, 1, 12, 0, seconds, tzinfo=UTC)
        assert keys.verify(new.secret) is not None
    assert len(writes) == 1
    assert keys.get(new.key.id).last_used_at == datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    clock[0] = datetime(2026, 3, 1, 12, 1, 0, tzinfo=UTC)
    info = keys.verify(new.secret)
    assert info is not None and info.last_used_at == clock[0]
    assert len(writes) == 2
    store._db.raw.set_trace_callback(None)
    assert keys.get(new.key.id).last_used_at == clock[0]


# ----------------------------------------------------------------------- audit log


def test_the_audit_log_lists_newest_first_and_filters(store: RunStore) -> None:
    log = AuditLog(store)
    first = log.record(None, "keys.create", target="k1", detail="cli")
    log.record("k1", "jobs.submit", target="job-1", status=202)
    log.record("k2", "check", status=200)
    last = log.record("k1", "jobs.cancel", target="job-1", status=200, detail="by owner")
    events = log.list()
    assert [e.action for e in events] == ["jobs.cancel", "check", "jobs.submit", "keys.create"]
    assert events[0] == last and events[-1] == first
    assert events[-1].key_id is None and events[-1].detail == "cli"
    assert events[1].status == 200 and events[1].target is None
    assert [e.action for e in log.list(key_id="k1")] == ["jobs.cancel", "jobs.submit"]
    assert [e.id for e in log.list(since_id=events[2].id)] == [events[0].id, events[1].id]
    assert len(log.list(limit=2)) == 2
    assert log.list(key_id="k1", since_id=last.id) == []
    assert events[0].at.tzinfo is not None


# ----------------------------------------------------------------------- jobs


def _submit(jobs: JobStore, n: int, key_id: str | None = "k1") -> list[str]:
    return [jobs.submit(JobKind.CHECK, json.dumps({"n": i}), key_id).id for i in range(n)]


def test_submit_get_and_list(store: RunStore) -> None:
    jobs = JobStore(store)
    job = jobs.submit("audit", '{"inputs": []}', "k1")
    assert job.status is JobStatus.QUEUED and job.kind is JobKind.AUDIT
    assert job.id.startswith("job-") and len(job.id) == len("job-20260101-120000-") + 8
    assert job.attempts == 0 and job.progress.done == 0 and not job.cancel_requested
    assert job.request == '{"inputs": []}' and job.result is None and not job.finished
    assert jobs.get(job.id) == job
    other = jobs.submit(JobKind.CHECK, "{}", "k2")
    assert [j.id for j in jobs.list()] == [other.id, job.id]
    assert [j.id for j in jobs.list(key_id="k1")] == [job.id]
    assert [j.id for j in jobs.list(status="queued", limit=1)] == [other.id]
    assert jobs.list(status=JobStatus.DONE) == []
    with pytest.raises(JobNotFound):
        jobs.get("job-nope")


def test_claim_takes_the_oldest_first_and_each_job_once(store: RunStore) -> None:
    jobs = JobStore(store)
    ids = _submit(jobs, 3)
    claimed = [jobs.claim(f"w{i}") for i in range(3)]
    assert [j.id for j in claimed if j] == ids
    first = claimed[0]
    assert first is not None and first.status is JobStatus.RUNNING and first.worker == "w0"
    assert first.attempts == 1 and first.started_at is not None
    assert first.heartbeat_at == first.started_at
    assert jobs.claim("w9") is None


def test_progress_heartbeat_and_finishing_once(store: RunStore) -> None:
    jobs = JobStore(store)
    [job_id] = _submit(jobs, 1)
    claimed = jobs.claim("w1")
    assert claimed is not None
    jobs.progress(job_id, 2, 5, run_id="run-1")
    jobs.progress(job_id, 3, 5)
    job = jobs.get(job_id)
    assert job.progress.done == 3 and job.progress.total == 5 and job.run_id == "run-1"
    assert job.heartbeat_at is not None and claimed.heartbeat_at is not None
    assert job.heartbeat_at >= claimed.heartbeat_at
    assert jobs.heartbeat([job_id], "w1") == 1
    assert jobs.heartbeat([job_id], "w2") == 0  # not its job
    assert jobs.heartbeat([], "w1") == 0
    assert jobs.finish(job_id, JobStatus.DONE, result_json='{"kind": "check"}')
    assert not jobs.finish(job_id, JobStatus.FAILED, error="late")
    assert not jobs.finish(job_id, JobStatus.DONE, result_json='{"other": 1}')
    job = jobs.get(job_id)
    assert job.status is JobStatus.DONE and job.result == '{"kind": "check"}'
    assert job.error is None and job.finished_at is not None and job.finished
    jobs.progress(job_id, 0, 0)
    assert jobs.get(job_id).progress.done == 3
    assert jobs.heartbeat([job_id], "w1") == 0
    with pytest.raises(ValueError):
        jobs.finish(job_id, JobStatus.RUNNING)
    assert not jobs.finish("job-nope", JobStatus.DONE)


def test_a_job_can_fail(store: RunStore) -> None:
    jobs = JobStore(store)
    [job_id] = _submit(jobs, 1)
    jobs.claim("w1")
    assert jobs.finish(job_id, "failed", error="the knowledge base is missing")
    job = jobs.get(job_id)
    assert job.status is JobStatus.FAILED and job.error == "the knowledge base is missing"
    assert jobs.request_cancel(job_id).status is JobStatus.FAILED


def test_cancelling_a_queued_job_is_immediate(store: RunStore) -> None:
    jobs = JobStore(store)
    [job_id, other] = _submit(jobs, 2)
    job = jobs.request_cancel(job_id)
    assert job.status is JobStatus.CANCELLED and job.finished_at is not None
    assert jobs.cancel_requested(job_id)
    claimed = jobs.claim("w1")
    assert claimed is not None and claimed.id == other
    assert jobs.claim("w1") is None
    assert not jobs.finish(job_id, JobStatus.DONE, result_json="{}")
    with pytest.raises(JobNotFound):
        jobs.request_cancel("job-nope")
    with pytest.raises(JobNotFound):
        jobs.cancel_requested("job-nope")


def test_cancelling_a_running_job_asks_its_worker(store: RunStore) -> None:
    jobs = JobStore(store)
    [job_id] = _submit(jobs, 1)
    jobs.claim("w1")
    assert not jobs.cancel_requested(job_id)
    job = jobs.request_cancel(job_id)
    assert job.status is JobStatus.RUNNING and job.cancel_requested
    assert jobs.cancel_requested(job_id)
    assert jobs.finish(job_id, JobStatus.CANCELLED)
    assert jobs.get(job_id).status is JobStatus.CANCELLED
    assert jobs.request_cancel(job_id).status is JobStatus.CANCELLED  # terminal: unchanged


def test_a_finished_job_is_not_cancelled(store: RunStore) -> None:
    jobs = JobStore(store)
    [job_id] = _submit(jobs, 1)
    jobs.claim("w1")
    jobs.finish(job_id, JobStatus.DONE, result_json="{}")
    job = jobs.request_cancel(job_id)
    assert job.status is JobStatus.DONE and not job.cancel_requested


def test_requeue_puts_a_running_job_back_with_its_attempts(store: RunStore) -> None:
    jobs = JobStore(store)
    [job_id, later] = _submit(jobs, 2)
    jobs.claim("w1")
    jobs.progress(job_id, 1, 4, run_id="run-1")
    assert jobs.requeue(job_id, "the service stopped; it will run again")
    job = jobs.get(job_id)
    assert job.status is JobStatus.QUEUED and job.attempts == 1 and job.worker is None
    assert job.error == "the service stopped; it will run again" and job.run_id == "run-1"
    assert not jobs.requeue(job_id, "again")  # not running
    again = jobs.claim("w2")
    assert again is not None and again.id == job_id and again.attempts == 2  # still first
    assert jobs.finish(job_id, JobStatus.DONE, result_json="{}")
    assert jobs.get(job_id).error is None
    assert not jobs.requeue(job_id, "late")
    assert jobs.get(later).status is JobStatus.QUEUED


def test_requeueing_a_job_whose_cancel_was_asked_cancels_it(store: RunStore) -> None:
    jobs = JobStore(store)
    [job_id] = _submit(jobs, 1)
    jobs.claim("w1")
    jobs.request_cancel(job_id)
    assert jobs.requeue(job_id, "shutting down")
    job = jobs.get(job_id)
    assert job.status is JobStatus.CANCELLED and job.finished_at is not None
    assert jobs.claim("w2") is None


def test_recover_requeues_stale_jobs_and_gives_up_after_max_attempts(store: RunStore) -> None:
    jobs = JobStore(store)
    [a, b, c] = _submit(jobs, 3)
    for worker in ("w1", "w2", "w3"):
        jobs.claim(worker)
    later = datetime.now(UTC) + timedelta(seconds=120)
    assert jobs.recover(stale_after_s=600, max_attempts=3, now=later) == (0, 0)  # alive
    jobs.heartbeat([c], "w3")
    db = store._db
    db.execute("UPDATE jobs SET heartbeat_at = '2000-01-01T00:00:00.000000+00:00'"
               " WHERE id != ?", (c,))
    assert jobs.recover(stale_after_s=60, max_attempts=3) == (2, 0)
    for job_id in (a, b):
        job = jobs.get(job_id)
        assert job.status is JobStatus.QUEUED and job.worker is None and job.attempts == 1
        assert job.error is not None and "interrupted" in job.error
    assert jobs.get(c).status is JobStatus.RUNNING
    assert jobs.finish(c, JobStatus.DONE, result_json="{}")
    # the job a is interrupted twice more: then it fails
    for attempt in (2, 3):
        job = jobs.claim("w4")
        assert job is not None and job.id == a and job.attempts == attempt
        assert jobs.recover(stale_after_s=60, max_attempts=3, now=later) == (
            (1, 0) if attempt == 2 else (0, 1))
    failed = jobs.get(a)
    assert failed.status is JobStatus.FAILED and failed.finished_at is not None
    assert failed.error == (
        "interrupted 3 times (the worker stopped while running it); giving up")
    assert not jobs.finish(a, JobStatus.DONE, result_json="{}")


def test_recover_cancels_a_stale_job_whose_cancel_was_asked(store: RunStore) -> None:
    jobs = JobStore(store)
    [job_id] = _submit(jobs, 1)
    jobs.claim("w1")
    jobs.request_cancel(job_id)
    later = datetime.now(UTC) + timedelta(seconds=120)
    assert jobs.recover(stale_after_s=60, max_attempts=3, now=later) == (0, 0)
    assert jobs.get(job_id).status is JobStatus.CANCELLED


def test_a_late_finish_from_a_worker_thought_dead_is_kept_once(store: RunStore) -> None:
    jobs = JobStore(store)
    [job_id] = _submit(jobs, 1)
    jobs.claim("slow")
    later = datetime.now(UTC) + timedelta(seconds=120)
    assert jobs.recover(stale_after_s=60, max_attempts=3, now=later) == (1, 0)
    assert jobs.claim("fresh") is not None
    assert jobs.heartbeat([job_id], "slow") == 0  # the slow worker learns it lost the job
    assert jobs.finish(job_id, JobStatus.DONE, result_json='{"by": "slow"}')
    assert not jobs.finish(job_id, JobStatus.DONE, result_json='{"by": "fresh"}')
    assert jobs.get(job_id).result == '{"by": "slow"}'


def test_two_connections_share_the_queue(store_location: Path | str) -> None:
    path = store_location
    with RunStore(path) as one, RunStore(path) as two:
        first, second = JobStore(one), JobStore(two)
        ids = _submit(first, 4)
        got = [first.claim("a"), second.claim("b"), second.claim("b"), first.claim("a")]
        assert [j.id for j in got if j] == ids
        assert first.claim("a") is None and second.claim("b") is None
        assert first.finish(ids[1], JobStatus.DONE, result_json='{"by": "a"}')
        assert not second.finish(ids[1], JobStatus.DONE, result_json='{"by": "b"}')
        second.request_cancel(ids[2])
        assert first.cancel_requested(ids[2])
        assert second.get(ids[1]).result == '{"by": "a"}'


def test_claim_inside_a_callers_transaction_is_rolled_back_with_it(store: RunStore) -> None:
    jobs = JobStore(store)
    [job_id] = _submit(jobs, 1)
    with pytest.raises(RuntimeError), store._transaction():
        assert jobs.claim("w1") is not None
        raise RuntimeError("boom")
    assert jobs.get(job_id).status is JobStatus.QUEUED


def _claim_all(path: str, worker: str, start: object, out: object) -> None:
    with RunStore(as_location(path)) as runs:
        jobs = JobStore(runs)
        start.wait(60)  # type: ignore[attr-defined]  # all four start together
        taken = []
        while (job := jobs.claim(worker)) is not None:
            taken.append(job.id)
            time.sleep(0.001)  # some work, so that the processes interleave
            assert jobs.finish(job.id, JobStatus.DONE, result_json=json.dumps(worker))
    out.put((worker, taken))  # type: ignore[attr-defined]


def test_four_processes_claim_200_jobs_each_exactly_once(store_location: Path | str) -> None:
    path = store_location
    with RunStore(path) as runs:
        ids = _submit(JobStore(runs), 200)
    ctx = racing_context()
    start, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_claim_all, args=(str(path), f"w{i}", start, out))
             for i in range(4)]
    for proc in procs:
        proc.start()
    results = dict(out.get(timeout=90) for _ in procs)
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    taken = Counter(job_id for got in results.values() for job_id in got)
    assert set(taken) == set(ids) and set(taken.values()) == {1}
    with RunStore(path) as runs:
        jobs = JobStore(runs)
        done = jobs.list(status=JobStatus.DONE, limit=500)
        assert len(done) == 200 and all(j.attempts == 1 for j in done)
        assert all(json.loads(j.result or "null") == j.worker for j in done)


# ----------------------------------------------------------------------- migration


def test_a_version_5_store_migrates_and_keeps_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    db = sqlite3.connect(path)
    for version, sql in migrations()[:5]:
        db.executescript(sql + f"\nPRAGMA user_version = {version};")
    db.execute("INSERT INTO runs VALUES ('r1', 'factcheck', 'done', '2026-01-01T00:00:00+00:00',"
               " NULL, '0.1.0', '{}', '{}', '{}', NULL, '{}', NULL)")
    db.commit()
    assert db.execute("PRAGMA user_version").fetchone()[0] == 5
    db.close()
    with RunStore(path) as runs:
        assert runs.schema_version == migrations()[-1][0] >= 6
        assert runs.get_run("r1").kind == "factcheck"
        new = KeyStore(runs).create("a")
        assert KeyStore(runs).verify(new.secret) is not None
        job = JobStore(runs).submit(JobKind.FACTCHECK, "{}", new.key.id)
        AuditLog(runs).record(new.key.id, "jobs.submit", target=job.id, status=202)
    with RunStore(path) as runs:  # reopening does not migrate again
        assert [r.id for r in runs.list_runs(10)] == ["r1"]
        assert JobStore(runs).get(job.id).kind is JobKind.FACTCHECK
        assert AuditLog(runs).list()[0].target == job.id
