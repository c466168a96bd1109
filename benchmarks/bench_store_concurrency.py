"""Shared-state benchmark (issue 19): 8 writer processes on one run store for 60 s, on
PostgreSQL and on SQLite, counting lost and duplicated records.

Each writer process opens its own :class:`~medverify.store.runs.RunStore` on the shared
store and, until the time is up, repeats one round of four writes, each on a table the
service shares between its workers:

* ``answer``: one answer with 3 claims in one transaction (``save_answer``) into the
  writer's own run, under a position of its own;
* ``audit``: one audit-log event (``AuditLog.record``: a generated id, a shared table);
* ``job``: one job submitted to the shared queue (``JobStore.submit``);
* ``claim``: the oldest queued job taken (``JobStore.claim``, any writer's) and finished
  with the taker's name as its result.

A writer lists what each acknowledged write gave back (answer positions, event ids, job
ids, taken job ids). At the end the store is read back and compared:

* lost: acknowledged but absent (an answer without its 3 claims counts as lost; a taken job
  not ``done`` with its taker's result is lost);
* duplicated: an answer, event or job stored twice; a job taken by two writers, or taken
  more than once (``attempts`` > 1);
* errors: writes that raised (the round goes on); on SQLite a writer waits for the lock up
  to 30 s.

PostgreSQL runs on a throwaway server (:mod:`medverify.testing.postgres`, Debian's
``postgresql``, default settings: fsync on, synchronous commits), or on ``--url``; SQLite
is a WAL file with its default (synchronous) commits, as the run store opens it. The
writers and the server share the machine's cores: the throughput numbers include that
contention (the load average is recorded).

Usage::

    .venv/bin/python benchmarks/bench_store_concurrency.py                # both, 8 x 60 s
    .venv/bin/python benchmarks/bench_store_concurrency.py --backend postgresql --duration 10
    .venv/bin/python benchmarks/bench_store_concurrency.py render        # the .md from .json

Writes benchmarks/results/store_concurrency.json (one section per backend, merged) and
store_concurrency.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from medverify.records import Answer, Claim, ClaimResult
from medverify.store.access import AuditLog
from medverify.store.jobs import JobKind, JobStatus, JobStore
from medverify.store.runs import RunStore

RESULTS = Path(__file__).resolve().parent / "results"
CLAIMS_PER_ANSWER = 3


@dataclass
class WriterLog:
    """What one writer process did: every acknowledged write, and the errors."""

    writer: str
    run_id: str
    answers: list[int] = field(default_factory=list)  # positions saved
    events: list[int] = field(default_factory=list)  # audit-log ids given back
    submitted: list[str] = field(default_factory=list)  # job ids
    taken: list[str] = field(default_factory=list)  # job ids this writer claimed and finished
    errors: dict[str, int] = field(default_factory=dict)  # "step: error type": how many

    @property
    def writes(self) -> int:
        return (len(self.answers) + len(self.events) + len(self.submitted)
                + 2 * len(self.taken))


@dataclass
class BackendResult:
    """One backend's run: counts and rates."""

    backend: str
    writers: int
    duration_s: float
    writes: int
    writes_per_s: float
    rounds: int
    answers: int
    events: int
    jobs_submitted: int
    jobs_taken: int
    errors: dict[str, int]
    lost: dict[str, int]
    duplicated: dict[str, int]
    unacknowledged_in_store: dict[str, int]
    load_average: list[float]
    ok: bool


def _results(writer: str, n: int) -> list[ClaimResult]:
    return [ClaimResult.failed(Claim(id=f"{writer}-{n}-c{i}", text=f"claim {i} of {n}"),
                               "not judged") for i in range(CLAIMS_PER_ANSWER)]


def _writer(location: str, writer: str, duration_s: float, start: Any, out: Any) -> None:
    target: Path | str = location if "://" in location else Path(location)
    store = RunStore(target)
    jobs, audit = JobStore(store), AuditLog(store)
    run_id = store.start_run(kind="bench-store", config={"writer": writer}, models={},
                             prompt_versions={}, kb_snapshot=None)
    log = WriterLog(writer=writer, run_id=run_id)
    start.wait(120)
    deadline = time.monotonic() + duration_s
    n = 0
    while time.monotonic() < deadline:
        _round(store, jobs, audit, log, n)
        n += 1
    store.close()
    out.put(asdict(log))


def _round(store: RunStore, jobs: JobStore, audit: AuditLog, log: WriterLog, n: int) -> None:
    """One round of the four writes; a write that raises is counted and the round goes on."""
    writer = log.writer

    def answer() -> None:
        store.save_answer(log.run_id, n, Answer(id=f"{writer}-a{n}", text=f"answer {n}"),
                          _results(writer, n))
        log.answers.append(n)

    def event() -> None:
        log.events.append(audit.record(None, "bench.write", target=f"{writer}-e{n}").id)

    def job() -> None:
        request = json.dumps({"writer": writer, "n": n})
        log.submitted.append(jobs.submit(JobKind.CHECK, request, None).id)

    for name, step in (("answer", answer), ("audit", event), ("job", job),
                       ("claim", lambda: _take(jobs, writer, log))):
        try:
            step()
        except Exception as exc:  # counted, and the writer goes on
            key = f"{name}: {type(exc).__name__}"
            log.errors[key] = log.errors.get(key, 0) + 1


def _take(jobs: JobStore, writer: str, log: WriterLog) -> None:
    job = jobs.claim(writer)
    if job is None:
        return
    if jobs.finish(job.id, JobStatus.DONE, result_json=json.dumps(writer)):
        log.taken.append(job.id)


def _check(location: str, logs: list[WriterLog]) -> tuple[dict[str, int], dict[str, int],
                                                          dict[str, int]]:
    """(lost, duplicated, stored but never acknowledged) per kind of record."""
    target: Path | str = location if "://" in location else Path(location)
    with RunStore(target) as store:
        db = store._db
        answers = Counter(
            (r[0], int(r[1])) for r in db.execute(
                "SELECT run_id, position FROM answers WHERE run_id IN"
                " (SELECT id FROM runs WHERE kind = 'bench-store')").fetchall())
        claims = Counter(
            (r[0], int(r[1])) for r in db.execute(
                "SELECT run_id, position FROM claims WHERE run_id IN"
                " (SELECT id FROM runs WHERE kind = 'bench-store')").fetchall())
        events = Counter(int(r[0]) for r in db.execute(
            "SELECT id FROM audit_log WHERE action = 'bench.write'").fetchall())
        event_targets = Counter(r[0] for r in db.execute(
            "SELECT target FROM audit_log WHERE action = 'bench.write'").fetchall())
        job_rows = {r[0]: (r[1], r[2], int(r[3]), r[4]) for r in db.execute(
            "SELECT id, status, worker, attempts, result FROM jobs").fetchall()}
        job_count = Counter(r[0] for r in db.execute("SELECT id FROM jobs").fetchall())

    lost: Counter[str] = Counter()
    duplicated: Counter[str] = Counter()
    extra: Counter[str] = Counter()
    acked_answers = {(log.run_id, p) for log in logs for p in log.answers}
    for key in acked_answers:
        if answers[key] == 0 or claims[key] != CLAIMS_PER_ANSWER:
            lost["answers"] += 1
    duplicated["answers"] = sum(n - 1 for n in answers.values() if n > 1)
    duplicated["answers"] += sum(1 for key, n in claims.items() if n > CLAIMS_PER_ANSWER)
    extra["answers"] = len(set(answers) - acked_answers)

    acked_events = [e for log in logs for e in log.events]
    lost["events"] = sum(1 for e in acked_events if events[e] == 0)
    duplicated["events"] = (len(acked_events) - len(set(acked_events))
                            + sum(n - 1 for n in event_targets.values() if n > 1))
    extra["events"] = len(set(events) - set(acked_events))

    submitted = [j for log in logs for j in log.submitted]
    lost["jobs"] = sum(1 for j in submitted if j not in job_rows)
    duplicated["jobs"] = (len(submitted) - len(set(submitted))
                          + sum(n - 1 for n in job_count.values() if n > 1))
    extra["jobs"] = len(set(job_rows) - set(submitted))

    takers: dict[str, list[str]] = {}
    for log in logs:
        for job_id in log.taken:
            takers.setdefault(job_id, []).append(log.writer)
    duplicated["taken"] = sum(len(w) - 1 for w in takers.values() if len(w) > 1)
    duplicated["taken"] += sum(1 for row in job_rows.values() if row[2] > 1)
    for job_id, writers in takers.items():
        row = job_rows.get(job_id)
        if row is None or row[0] != "done" or json.loads(row[3] or "null") != writers[0]:
            lost["taken"] += 1
    for kind in ("answers", "events", "jobs", "taken"):
        lost[kind] += 0
        duplicated[kind] += 0
    return dict(lost), dict(duplicated), dict(extra)


def run_backend(backend: str, location: str, writers: int, duration_s: float) -> BackendResult:
    RunStore(location if "://" in location else Path(location)).close()  # migrated once
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(writers + 1), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(location, f"w{i}", duration_s, start, out))
             for i in range(writers)]
    for proc in procs:
        proc.start()
    start.wait(120)
    began = time.monotonic()
    raw = [out.get(timeout=duration_s + 300) for _ in procs]
    elapsed = time.monotonic() - began
    for proc in procs:
        proc.join(60)
    logs = [WriterLog(**item) for item in raw]
    lost, duplicated, extra = _check(location, logs)
    errors: Counter[str] = Counter()
    for log in logs:
        errors.update(log.errors)
    writes = sum(log.writes for log in logs)
    return BackendResult(
        backend=backend, writers=writers, duration_s=round(elapsed, 1), writes=writes,
        writes_per_s=round(writes / elapsed, 1),
        rounds=sum(len(log.answers) for log in logs),
        answers=sum(len(log.answers) for log in logs),
        events=sum(len(log.events) for log in logs),
        jobs_submitted=sum(len(log.submitted) for log in logs),
        jobs_taken=sum(len(log.taken) for log in logs), errors=dict(errors), lost=lost,
        duplicated=duplicated, unacknowledged_in_store=extra,
        load_average=[round(x, 2) for x in os.getloadavg()],
        ok=not any(lost.values()) and not any(duplicated.values()))


def render(data: dict[str, Any]) -> str:
    lines = [
        "# Shared state: 8 concurrent writers (issue 19)",
        "",
        "Generated by `benchmarks/bench_store_concurrency.py` from `store_concurrency.json`.",
        "Each writer process repeats: one answer with 3 claims (one transaction), one "
        "audit-log event, one job submitted, one job taken from the shared queue and "
        "finished. Lost: acknowledged but not in the store; duplicated: stored or taken "
        "twice. Target: 0 lost, 0 duplicated.",
        "",
        "| backend | writers | s | writes | writes/s | answers | events | jobs submitted "
        "| jobs taken | lost | duplicated | errors | load avg | ok |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ("postgresql", "sqlite"):
        r = data.get("backends", {}).get(name)
        if r is None:
            continue
        lines.append(
            f"| {name} | {r['writers']} | {r['duration_s']} | {r['writes']} | "
            f"{r['writes_per_s']} | {r['answers']} | {r['events']} | {r['jobs_submitted']} | "
            f"{r['jobs_taken']} | {sum(r['lost'].values())} | "
            f"{sum(r['duplicated'].values())} | {sum(r['errors'].values())} | "
            f"{', '.join(str(x) for x in r['load_average'])} | {'yes' if r['ok'] else 'NO'} |")
    machine = data.get("machine", {})
    lines += [
        "",
        f"Machine: {machine.get('cpus')} CPUs, Python {machine.get('python')}, "
        f"{machine.get('postgresql', 'PostgreSQL ?')} (default settings, fsync on, on this "
        f"machine); run {data.get('updated', '?')}. "
        "The writers and the server share the cores (other work ran on this machine too: "
        "see the load average), so the rates are for comparison on one machine only.",
        "",
        "Per backend, lost / duplicated by kind:",
        "",
    ]
    for name, r in sorted(data.get("backends", {}).items()):
        lines.append(f"- {name}: lost {r['lost']}, duplicated {r['duplicated']}, "
                     f"stored but never acknowledged {r['unacknowledged_in_store']}, "
                     f"errors {r['errors'] or 'none'}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", nargs="?", default="run", choices=["run", "render"])
    parser.add_argument("--backend", choices=["both", "postgresql", "sqlite"], default="both")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--url", help="a PostgreSQL database to use (default: a throwaway "
                        "server); its bench rows are added to what is there")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    path = args.out / "store_concurrency.json"
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    if args.part == "run":
        data.setdefault("backends", {})
        machine = {"cpus": os.cpu_count(), "python": platform.python_version()}
        if args.backend in ("both", "postgresql"):
            cluster = None
            url = args.url
            if url is None:
                from medverify.testing.postgres import start_cluster

                cluster = start_cluster(durable=True)  # fsync on, as SQLite syncs
                url = cluster.create_database()
            try:
                import psycopg

                with psycopg.connect(url) as conn:
                    row = conn.execute("SHOW server_version").fetchone()
                machine["postgresql"] = f"PostgreSQL {row[0] if row else '?'}"
                result = run_backend("postgresql", url, args.writers, args.duration)
            finally:
                if cluster is not None:
                    cluster.remove()
            data["backends"]["postgresql"] = asdict(result)
            print(json.dumps(asdict(result), indent=1), file=sys.stderr)
        if args.backend in ("both", "sqlite"):
            with tempfile.TemporaryDirectory(prefix="mv-bench-store-") as tmp:
                result = run_backend("sqlite", str(Path(tmp) / "runs.db"), args.writers,
                                     args.duration)
            data["backends"]["sqlite"] = asdict(result)
            print(json.dumps(asdict(result), indent=1), file=sys.stderr)
        data["machine"] = {**data.get("machine", {}), **machine}
        data["updated"] = datetime.now(UTC).isoformat(timespec="seconds")
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1) + "\n")
    (args.out / "store_concurrency.md").write_text(render(data))
    ok = all(r["ok"] for r in data.get("backends", {}).values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
