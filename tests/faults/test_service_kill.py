"""Kill -9 the service while it runs queued jobs; restart it on the same store; every job
ends with one result (issue 15; the full-size run is ``benchmarks/bench_service.py kill``).

40 check jobs of one answer each go through ``POST /v1/jobs/check`` to ``medverify serve``
in a subprocess, whose judge is the LLM judge at a local fake server (200 ms a call). The
server's process group is SIGKILLed twice, at seeded moments inside a job's judge call, and
restarted each time on the same run store and home (``stale_after_s`` 2, ``heartbeat_s``
0.5, so the killed jobs are queued again within seconds). Then: 40 results, each holding
its job's answer once; no answer in two jobs' results; each job's run in the store holds
its answer once; no job lost or failed; and some job was really interrupted and rerun.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore
from medverify.testing import FakeChatServer
from medverify.testing.faults import cli_env, kill_points
from medverify.testing.judge import keyword_rule, scripted_judge
from medverify.testing.service import ServiceProcess, wait_until

SEED = 15
JOBS = 40
KILLS = 2
LATENCY_S = 0.2
TERMINAL = ("done", "failed", "cancelled")

pytestmark = pytest.mark.timeout(240)


def _answer(n: int) -> dict[str, str]:
    return {"question": "What is metformin used for?",
            "text": f"Metformin is a first-line medicine in treatment plan number {n}."}


def _statuses(db: sqlite3.Connection) -> Counter[str]:
    return Counter(dict(db.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status")))


def _finished(db: sqlite3.Connection) -> int:
    counts = _statuses(db)
    return sum(counts[s] for s in TERMINAL)


def _started_since(db: sqlite3.Connection, since: str) -> int:
    return int(db.execute("SELECT COUNT(*) FROM jobs WHERE status = 'running'"
                          " AND started_at >= ?", (since,)).fetchone()[0])


def test_jobs_survive_sigkill_with_one_result_each(tmp_path: Path) -> None:
    kb, store, home = tmp_path / "kb", tmp_path / "runs.db", tmp_path / "home"
    with KnowledgeBase.create(kb, embedder="hash") as base:
        base.ingest([Document(doc_id="metformin", title="Metformin",
                              text="Metformin is a first-line medicine for type 2 diabetes.")])
    with RunStore(store) as runs:
        secret = KeyStore(runs).create("client", Role.CLIENT).secret
    auth = {"Authorization": f"Bearer {secret}"}
    points = kill_points(SEED, KILLS, 0.1 * JOBS, 0.9 * JOBS)
    rng = random.Random(SEED + 1)
    submitted: dict[str, str] = {}
    at_kill: list[Counter[str]] = []

    with FakeChatServer(scripted_judge(keyword_rule(supported="first-line")),
                        delay_s=LATENCY_S) as fake:
        env = cli_env(home, MEDVERIFY_DECOMPOSER="rules",
                      MEDVERIFY_SERVICE__STALE_AFTER_S="2",
                      MEDVERIFY_SERVICE__HEARTBEAT_S="0.5",
                      MEDVERIFY_SERVICE__RATE_PER_MINUTE="1000000",
                      MEDVERIFY_SERVICE__RATE_BURST="1000000")

        def start() -> ServiceProcess:
            return ServiceProcess(kb=kb, store=store, home=home, env=env,
                                  log=tmp_path / "serve.log",
                                  args=["-m", f"openai-compatible:bench@{fake.base_url}"]
                                  ).start()

        db = sqlite3.connect(store, timeout=30.0)
        server = start()
        try:
            with httpx.Client(base_url=server.url, headers=auth, timeout=60.0) as http:
                for i in range(JOBS):
                    answer = _answer(i)
                    response = http.post("/v1/jobs/check", json={"answers": [answer]})
                    assert response.status_code == 202, response.text
                    submitted[response.json()["id"]] = answer["text"]
            for point in points:
                assert wait_until(lambda p=point: _finished(db) >= p, 60.0), _statuses(db)
                # a job taken from now on, killed inside its judge call
                since = datetime.now(UTC).isoformat(timespec="microseconds")
                assert wait_until(lambda s=since: _started_since(db, s) > 0, 30.0, 0.005)
                time.sleep(rng.uniform(0.0, LATENCY_S / 2))
                at_kill.append(_statuses(db))
                server.kill()
                server = start()
            assert wait_until(lambda: _finished(db) >= JOBS, 90.0, 0.05), _statuses(db)
            with httpx.Client(base_url=server.url, headers=auth, timeout=60.0) as http:
                jobs = {job_id: http.get(f"/v1/jobs/{job_id}") for job_id in submitted}
        finally:
            server.kill()
            db.close()

    lost = [i for i, r in jobs.items()
            if r.status_code != 200 or r.json()["status"] not in TERMINAL]
    assert lost == [], f"jobs lost: {lost}"
    found: dict[str, dict[str, Any]] = {i: r.json() for i, r in jobs.items()}
    failed = {i: (j["status"], j["error"]) for i, j in found.items() if j["status"] != "done"}
    assert failed == {}, failed

    across: Counter[str] = Counter()
    with sqlite3.connect(store) as db:
        for job_id, text in submitted.items():
            job = found[job_id]
            reports = job["result"]["reports"]
            assert [r["answer"]["text"] for r in reports] == [text], job_id
            across.update(r["answer"]["text"] for r in reports)
            rows = db.execute("SELECT position, answer FROM answers WHERE run_id = ?",
                              (job["run_id"],)).fetchall()
            assert [(p, json.loads(a)["text"]) for p, a in rows] == [(0, text)], job_id
    assert len(across) == JOBS and set(across.values()) == {1}
    run_ids = [j["run_id"] for j in found.values()]
    assert len(set(run_ids)) == JOBS, "two jobs share a run"

    attempts = Counter(j["attempts"] for j in found.values())
    assert all(c["running"] > 0 for c in at_kill), at_kill
    assert max(attempts) >= 2, f"no job was interrupted by the kills: {attempts}"
    print(f"\nFAULTS service kill: points {points}, at kill {[dict(c) for c in at_kill]}, "
          f"attempts {dict(attempts)}, results {len(across)}/{JOBS}")
