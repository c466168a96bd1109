"""Two replicas behind nginx, one killed (issue 46 item 4; docs/scale.md, "Several replicas").

Two ``medverify serve`` processes (one worker each, own loopback ports) share one
throwaway PostgreSQL (tests/postgres_server.py's server: medverify.testing.postgres) for
the run store, the job queue, the review queue and the KB (the shipped MedQuAD sample,
hash embedder, ingested into PostgreSQL); Debian's nginx balances them
(medverify.testing.replicas: round robin, ``max_fails=1 fail_timeout=5s``,
``proxy_next_upstream error timeout``, never a POST twice). The judge is an LLM at a local
OpenAI-compatible fake endpoint (``--latency`` per call, its own process), as
bench_service.py's section 3; the decomposer is the rules one.

1. **Kill.** ``--jobs`` check jobs are queued through nginx while ``--clients`` closed-loop
   clients send ``POST /v1/check`` through it (bench_service_load.drive); once a quarter
   of the jobs are finished replica A gets SIGKILL, and it is started again on its port
   ``--down`` seconds later. Counted: jobs lost, run twice (section 3's definitions,
   read from PostgreSQL), every 5xx a client saw, and from nginx's access log whether each
   was in flight on A when it was killed (sent to A before the kill, answered after).
   Target: 0 lost, 0 twice, no 5xx beyond those in flight on A.
2. **Teach.** ``--trials`` times: a claim is checked on A (escalated: COVERAGE_GAP is
   escalated here) and a reviewer's label (FACT with a source URL) closes its item on A,
   which teaches it to the KB; meanwhile 4 probes check the claim on B over and over.
   Measured: from A's answer to the first of B's checks whose passages hold the taught
   document; B's ``/readyz`` ``kb_replica_generation`` reaching A's generation; B's checks
   sent more than 2 s after the teach without the taught document (stale). Target: p95
   <= 2 s, 0 stale.

    python benchmarks/bench_replicas.py            # writes benchmarks/results/replicas.md/json
    python benchmarks/bench_replicas.py --quick    # fewer jobs and trials, nothing written
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from bench_service_common import (
    RESULTS,
    TERMINAL,
    UNLIMITED,
    load_average,
    machine,
    met_word,
    one_claim_answer,
    percentiles,
    stamp,
)
from bench_service_load import _fake_judge_server, count_jobs, drive, late_limit

from medverify.config import KBSettings
from medverify.kb import iter_documents, sample_kb_path
from medverify.kb.postgres import PostgresKB
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore
from medverify.testing.faults import cli_env
from medverify.testing.postgres import PgCluster, start_cluster
from medverify.testing.replicas import Logged, Nginx, Replica, read_access_log
from medverify.testing.service import wait_until

BOUND_S = 2.0
"""The issue's bound: taught on A, used by B's checks within this many seconds (p95)."""
PROBES = 4
"""Concurrent checks of the taught claim on B (a finer clock than one check's latency)."""


# -- the deployment --------------------------------------------------------------------


class Deployment:
    """The PostgreSQL server, the KB in it, the keys, the fake judge, two replicas and
    nginx; :meth:`close` stops everything it started (in a finally)."""

    def __init__(self, work: Path, latency_s: float, poll_s: float) -> None:
        self.work, self.latency_s, self.poll_s = work, latency_s, poll_s
        self.cluster: PgCluster | None = None
        self.own_cluster = True  # False: a cluster the caller started (and removes)
        self.replicas: list[Replica] = []
        self.nginx: Nginx | None = None
        self.fake: Any = None
        self.pipe: Any = None
        self.keys: dict[Role, str] = {}
        self.kb_info: dict[str, Any] = {}

    def open(self, cluster: PgCluster | None = None) -> Deployment:
        self.own_cluster = cluster is None
        self.cluster = cluster or start_cluster()
        self.url = self.cluster.create_schema()
        self.kb_info = ingest_sample(self.url)
        with RunStore(self.url) as runs:
            keys = KeyStore(runs)
            self.keys = {r: keys.create(f"{r.value} key", r).secret for r in Role}
        context = multiprocessing.get_context("spawn")
        self.pipe, theirs = context.Pipe()
        self.fake = context.Process(target=_fake_judge_server, args=(theirs, self.latency_s),
                                    daemon=True)
        self.fake.start()
        if not self.pipe.poll(60.0):
            raise RuntimeError("the fake judge's process did not start")
        model = f"openai-compatible:bench@{self.pipe.recv()}"
        env = cli_env(self.work / "home", **UNLIMITED, MEDVERIFY_DECOMPOSER="rules",
                      MEDVERIFY_SERVICE__STALE_AFTER_S="2",
                      MEDVERIFY_SERVICE__HEARTBEAT_S="0.5",
                      MEDVERIFY_ARBITRATION__COVERAGE_GAP="ESCALATE",
                      MEDVERIFY_KB_SETTINGS__GENERATION_POLL_S=str(self.poll_s))
        self.replicas = [Replica(name, self.url, self.work, env, args=["-m", model])
                         for name in ("a", "b")]
        for replica in self.replicas:
            replica.start()
        self.nginx = Nginx(self.work / "nginx", [r.address for r in self.replicas]).start()
        return self

    def auth(self, role: Role = Role.CLIENT) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[role]}"}

    def close(self) -> None:
        if self.nginx is not None:
            self.nginx.stop()
        for replica in self.replicas:
            replica.server.kill()
        if self.fake is not None and self.fake.is_alive():
            self.pipe.send("stop")
            if self.pipe.poll(10.0):
                self.pipe.recv()
            self.fake.join(10)
            if self.fake.is_alive():
                self.fake.kill()
        if self.cluster is not None and self.own_cluster:
            self.cluster.remove()


def ingest_sample(url: str) -> dict[str, Any]:
    """The shipped MedQuAD sample into the KB at ``url`` (hash embedder)."""
    began = time.perf_counter()
    with PostgresKB.open(url, KBSettings(embedder="hash")) as kb:
        kb.ingest(iter_documents([sample_kb_path()]))
        documents, chunks = kb.counts()
        generation = kb.generation
    return {"source": sample_kb_path().name, "embedder": "hash", "documents": documents,
            "chunks": chunks, "generation": generation,
            "ingest_s": round(time.perf_counter() - began, 2)}


# -- 1. kill ---------------------------------------------------------------------------


def submit_jobs(d: Deployment, jobs: int) -> dict[str, str]:
    """``jobs`` one-answer check jobs through nginx; job id -> the answer's text."""
    submitted = {}
    assert d.nginx is not None
    with httpx.Client(base_url=d.nginx.url, headers=d.auth(), timeout=60.0) as http:
        for i in range(jobs):
            answer = one_claim_answer(50_000_000 + i)
            response = http.post("/v1/jobs/check", json={"answers": [answer]})
            assert response.status_code == 202, response.text
            submitted[response.json()["id"]] = answer["text"]
    return submitted


def terminal_jobs(url: str) -> int:
    with RunStore(url) as runs:
        rows = runs._db.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
    return sum(n for status, n in rows if status in TERMINAL)


def steady_load(d: Deployment, clients: int, duration_s: float) -> tuple[threading.Thread,
                                                                         dict[str, Any]]:
    """bench_service_load.drive through nginx in a thread; its summary lands in the dict."""
    out: dict[str, Any] = {}
    assert d.nginx is not None
    url = d.nginx.url

    def run() -> None:
        out.update(asyncio.run(drive(url, d.keys[Role.CLIENT], clients, duration_s,
                                     lambda n: one_claim_answer(60_000_000 + n),
                                     late_limit())))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def run_kill(d: Deployment, jobs: int, clients: int, down_s: float, finish_timeout_s: float,
             load_s: float = 20.0, kills: int = 1, rejoin: bool = True) -> dict[str, Any]:
    """Jobs and ``load_s`` seconds of steady traffic through nginx; ``kills`` SIGKILLs, A
    first (after a quarter of the jobs), then B, A, ... evenly up to three quarters of the
    jobs finished, each replica started again ``down_s`` later and, with ``rejoin``, the
    next kill only once nginx sends the restarted one requests again (without: as soon as
    the restarted one answers /readyz); the audit."""
    load_before = load_average()
    began = time.perf_counter()
    submitted = submit_jobs(d, jobs)
    submit_s = time.perf_counter() - began
    thread, load = steady_load(d, clients, duration_s=load_s)
    killed: list[dict[str, Any]] = []
    for n in range(kills):
        victim = d.replicas[n % 2]
        point = jobs // 4 + n * (jobs // 2) // max(1, kills - 1)  # within [1/4, 3/4]
        if rejoin or n == 0:  # without rejoin: the next kill as soon as the last is up
            wait_until(lambda p=point: terminal_jobs(d.url) >= p, finish_timeout_s, 0.05)
        finished_at = terminal_jobs(d.url)
        at = victim.kill()
        time.sleep(down_s)
        victim.start()
        restarted = time.time()
        back = rejoined(d, victim.address, restarted) if rejoin and n + 1 < kills else None
        killed.append({"replica": victim.name, "address": victim.address, "at": at,
                       "restarted": restarted, "finished_at_kill": finished_at,
                       "rejoined_after_s": back})
    finished = wait_until(lambda: terminal_jobs(d.url) >= jobs, finish_timeout_s, 0.1)
    thread.join(finish_timeout_s)
    wall = time.perf_counter() - began
    assert d.nginx is not None
    seen = job_states(d, submitted)
    audit = audit_jobs_pg(d.url, submitted, seen)
    audit.update(five_xx(read_access_log(d.nginx.access_log), killed))
    duplicates = (audit["duplicates_in_a_job"] + audit["duplicates_across_jobs"]
                  + audit["duplicates_in_run_store"] + audit["runs_shared_by_jobs"])
    met = (audit["lost"] == 0 and duplicates == 0 and audit["results"] == jobs
           and audit["five_xx_not_in_flight"] == 0)
    audit.update({
        "jobs": jobs, "clients": clients, "down_s": down_s, "all_finished": finished,
        "kills": killed, "finished_at_kill": killed[0]["finished_at_kill"] if killed else None,
        "submit_s": round(submit_s, 2),
        "wall_s": round(wall, 2), "replica_starts_s": {r.name: [round(s, 2) for s in r.starts]
                                                       for r in d.replicas},
        "load": load, "duplicates": duplicates, "load_average_before": load_before,
        "load_average_after": load_average(), "met": met})
    return audit


def rejoined(d: Deployment, address: str, since: float, timeout_s: float = 30.0) -> float | None:
    """Seconds after ``since`` until nginx's log shows a request answered by ``address``
    (nginx tries a replica it marked failed again only after ``fail_timeout``)."""
    assert d.nginx is not None
    log = d.nginx.access_log

    def answered() -> bool:
        return any(r.start >= since and r.upstreams and r.upstreams[-1] == address
                   and r.status < 500 for r in read_access_log(log))

    return time.time() - since if wait_until(answered, timeout_s, 0.1) else None


def job_states(d: Deployment, submitted: dict[str, str]) -> dict[str, dict[str, Any] | None]:
    assert d.nginx is not None
    seen: dict[str, dict[str, Any] | None] = {}
    with httpx.Client(base_url=d.nginx.url, headers=d.auth(), timeout=60.0) as http:
        for job_id in submitted:
            response = http.get(f"/v1/jobs/{job_id}")
            seen[job_id] = response.json() if response.status_code == 200 else None
    return seen


def audit_jobs_pg(url: str, submitted: dict[str, str],
                  seen: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """bench_service_load's job counts (section 3's definitions) on the PostgreSQL run
    store: lost, failed, mismatched, an answer twice in a job, in two jobs or in the run
    store, a run shared by two jobs."""
    with RunStore(url) as runs:
        audit = count_jobs({job: [text] for job, text in submitted.items()}, seen,
                           lambda run_id: runs._db.execute(
                               "SELECT position, answer FROM answers WHERE run_id = ? "
                               "ORDER BY position", (run_id,)).fetchall())
    audit.pop("run_ids")
    return audit


def five_xx(logged: list[Logged], killed: list[dict[str, Any]]) -> dict[str, Any]:
    """Every 5xx nginx answered, and which were in flight on a replica when it was killed
    (sent to it before the kill, ended after it); requests by the replica that answered."""
    errors = [r for r in logged if r.status >= 500 and r.status != 503]  # 503: a refusal

    def in_flight_on_killed(r: Logged) -> bool:
        return any(r.upstreams and r.upstreams[-1] == k["address"]
                   and r.start <= k["at"] + 0.05 and r.end >= k["at"] for k in killed)

    in_flight = [r for r in errors if in_flight_on_killed(r)]
    first = killed[0]["at"] if killed else 0.0
    retried = [r for r in logged if len(r.upstreams) > 1]
    by_replica: Counter[str] = Counter(r.upstreams[-1] if r.upstreams else "-" for r in logged)
    return {
        "requests_logged": len(logged), "requests_by_replica": dict(by_replica),
        "five_xx": len(errors), "five_xx_in_flight_on_killed": len(in_flight),
        "five_xx_not_in_flight": len(errors) - len(in_flight),
        "refused_503": sum(1 for r in logged if r.status == 503),
        "five_xx_samples": [f"{r.method} {r.path} {r.status} via {','.join(r.upstreams)} "
                            f"{r.start - first:+.2f}..{r.end - first:+.2f} s"
                            for r in errors[:10]],
        "passed_to_the_other_replica": len(retried),
        # nginx had marked every replica failed (max_fails within fail_timeout): 502 at once
        "no_live_replica": sum(1 for r in logged if r.upstreams == ("medverify",)),
    }


# -- 2. teach --------------------------------------------------------------------------


def taught_claim(i: int) -> dict[str, str]:
    """A one-claim answer the fake judge cannot settle (COVERAGE_GAP: escalated here)."""
    return {"question": "How is osteoporosis treated?",
            "text": f"Zoledronate infusions are given once yearly in care pathway {i}."}


def escalate(d: Deployment, answer: dict[str, str]) -> str:
    """Check ``answer`` on replica A; the id of the review item its claim opened."""
    a = d.replicas[0]
    with httpx.Client(base_url=a.url, timeout=60.0) as http:
        response = http.post("/v1/check", json=answer, headers=d.auth())
        assert response.status_code == 200, response.text
        items = http.get("/v1/review/items", params={"status": "open", "limit": 500},
                         headers=d.auth(Role.REVIEWER)).json()
    claim = answer["text"].rstrip(".")
    [item] = [i for i in items if i["claim"]["text"].rstrip(".") == claim]
    return str(item["id"])


async def probe(url: str, headers: dict[str, str], answer: dict[str, str], doc_id: str,
                until: float, seen: list[tuple[float, float, bool]]) -> None:
    """Check ``answer`` on one replica again and again until ``until`` (perf_counter);
    each check's (sent, answered, whether a passage of its claim is ``doc_id``)."""
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60.0) as http:
        while time.perf_counter() < until:
            sent = time.perf_counter()
            response = await http.post("/v1/check", json=answer, params={"detail": "full"})
            done = time.perf_counter()
            if response.status_code != 200:
                seen.append((sent, done, False))
                continue
            passages = [p["doc_id"] for r in response.json()["results"]
                        for p in r["passages"]]
            seen.append((sent, done, doc_id in passages))


async def teach_once(d: Deployment, answer: dict[str, str], item_id: str,
                     watch_s: float) -> dict[str, Any]:
    """Label the item on A (which teaches it) while B is probed; the timings."""
    a, b = d.replicas
    doc_id = f"review-{item_id}"
    seen: list[tuple[float, float, bool]] = []
    start = time.perf_counter()
    probes = [asyncio.create_task(probe(b.url, d.auth(), answer, doc_id, start + watch_s, seen))
              for _ in range(PROBES)]
    await asyncio.sleep(0.3)  # the probes are running before the teach
    async with httpx.AsyncClient(base_url=a.url, timeout=60.0) as http:
        sent = time.perf_counter()
        response = await http.post(f"/v1/review/items/{item_id}/labels",
                                   headers=d.auth(Role.REVIEWER), json={
                                       "label": "FACT",
                                       "source_url": f"https://example.org/guideline/{item_id}"})
        taught = time.perf_counter()
        assert response.status_code == 200, response.text
        generation = (await http.get("/readyz")).json()["kb_generation"]
    caught_up = await replica_catch_up(b.url, generation, taught, start + watch_s)
    await asyncio.gather(*probes)
    visible = [done - taught for sent_at, done, has in seen if has and sent_at >= sent]
    late = [s for s in seen if s[0] >= taught + BOUND_S]
    return {"label_s": taught - sent, "visible_s": min(visible) if visible else None,
            "replica_generation_s": caught_up, "generation": generation,
            "checks_after_bound": len(late),
            "stale_after_bound": sum(1 for s in late if not s[2]),
            "before_teach_with_doc": sum(1 for s in seen if s[2] and s[1] < sent)}


async def replica_catch_up(url: str, generation: int, since: float,
                           until: float) -> float | None:
    """Seconds from ``since`` until B's /readyz says its index has ``generation``."""
    async with httpx.AsyncClient(base_url=url, timeout=10.0) as http:
        while time.perf_counter() < until:
            ready = (await http.get("/readyz")).json()
            if (ready.get("kb_replica_generation") or 0) >= generation:
                return time.perf_counter() - since
            await asyncio.sleep(0.02)
    return None


def run_teach(d: Deployment, trials: int, watch_s: float) -> dict[str, Any]:
    load_before = load_average()
    rows = []
    for i in range(trials):
        answer = taught_claim(i)
        item_id = escalate(d, answer)
        rows.append(asyncio.run(teach_once(d, answer, item_id, watch_s)))
    visible = [r["visible_s"] for r in rows if r["visible_s"] is not None]
    caught = [r["replica_generation_s"] for r in rows if r["replica_generation_s"] is not None]
    stale = sum(r["stale_after_bound"] for r in rows)
    p95 = percentiles(visible)["p95_ms"] / 1000 if visible else float("inf")
    return {
        "trials": trials, "probes": PROBES, "watch_s": watch_s, "bound_s": BOUND_S,
        "generation_poll_s": d.poll_s, "visible": percentiles(visible),
        "visible_max_ms": round(max(visible) * 1000, 1) if visible else None,
        "never_visible": trials - len(visible),
        "replica_generation": percentiles(caught),
        "replica_generation_max_ms": round(max(caught) * 1000, 1) if caught else None,
        "replica_never_caught_up": trials - len(caught),
        "label_request": percentiles([r["label_s"] for r in rows]),
        "checks_after_bound": sum(r["checks_after_bound"] for r in rows),
        "stale_after_bound": stale, "rows": rows,
        "load_average_before": load_before, "load_average_after": load_average(),
        "met": p95 <= BOUND_S and stale == 0 and len(visible) == trials}


# -- report ----------------------------------------------------------------------------


def render(r: dict[str, Any]) -> str:
    k, t = r["kill"], r["teach"]
    lat = k["load"].get("latency", {})
    lines = [
        "# Two replicas behind nginx, one killed (issue 46 item 4)", "",
        f"{r['date']}; {r['machine']['cpus']} CPUs ({r['machine']['cpu_model']}), shared "
        f"machine; load average {r['load_average_before']} before, "
        f"{r['load_average_after']} after. `{r['command']}`", "",
        f"Two `medverify serve` (1 worker each) on one throwaway PostgreSQL (run store, jobs, "
        f"review queue and KB: {r['kb']['documents']} documents, {r['kb']['chunks']} chunks of "
        f"the MedQuAD sample, hash embedder), nginx {r['nginx']} in front (round robin, "
        "`max_fails=1 fail_timeout=5s`, `proxy_next_upstream error timeout`). Judge: an LLM "
        f"at a local fake endpoint, {r['latency_s'] * 1000:g} ms a call; rules decomposer.",
        "", f"## 1. Kill -9 of a replica ({len(k['kills'])} times) during {k['jobs']} queued "
        "jobs and steady traffic: "
        f"{met_word(k['met'])}", "",
        f"{k['clients']} closed-loop clients posted `/v1/check` through nginx for "
        f"{k['load'].get('duration_s')} s; "
        + "; ".join(f"{x['replica'].upper()} was killed with {x['finished_at_kill']} of "
                    f"{k['jobs']} jobs finished" for x in k["kills"])
        + f", each started again {k['down_s']:g} s later; nginx sent the restarted replica "
        f"requests again after {_seconds([x['rejoined_after_s'] for x in k['kills']])} "
        f"(starts took {k['replica_starts_s']}).", "",
        "| | value | target |", "|---|---|---|",
        f"| jobs finished with their answer's result | {k['results']} / {k['jobs']} | all |",
        f"| jobs lost | {k['lost']} | 0 |",
        f"| jobs run twice (in a job, across jobs, in the run store, a run shared) | "
        f"{k['duplicates']} | 0 |",
        f"| job attempts (attempts: jobs; 2: taken again after its replica was killed) | "
        f"{k['attempts']} | |",
        f"| 5xx answered by nginx (502/504; 503 refusals apart: {k['refused_503']}) | "
        f"{k['five_xx']} | |",
        f"| of those, in flight on the replica when it was killed | "
        f"{k['five_xx_in_flight_on_killed']} | |",
        f"| 5xx not in flight on a killed replica | {k['five_xx_not_in_flight']} | 0 |",
        f"| 502 at once because nginx had marked both replicas failed (no live upstream) | "
        f"{k['no_live_replica']} | |",
        f"| requests nginx passed to the other replica (connection refused) | "
        f"{k['passed_to_the_other_replica']} | |",
        f"| check requests: answered / all (client side) | {k['load'].get('ok')} / "
        f"{k['load'].get('requests')} | |",
        f"| check latency p50 / p95 / p99 (answered) | {lat.get('p50_ms')} / "
        f"{lat.get('p95_ms')} / {lat.get('p99_ms')} ms | |",
        "", f"Requests by the replica that answered: {k['requests_by_replica']}. 5xx: "
        f"{k['five_xx_samples'] or 'none'} (times from the kill).", "",
        f"## 2. Taught on A, used by B's checks: {met_word(t['met'])}", "",
        f"{t['trials']} trials, `generation_poll_s` = {t['generation_poll_s']:g}; {t['probes']} "
        f"probes check the taught claim on B again and again for {t['watch_s']:g} s.", "",
        "| | p50 | p95 | max | target |", "|---|---|---|---|---|",
        f"| from A's answer to the answer of B's first check with the taught passage | "
        f"{t['visible']['p50_ms']} ms | {t['visible']['p95_ms']} ms | {t['visible_max_ms']} ms"
        f" | p95 <= {t['bound_s'] * 1000:g} ms |",
        f"| until B's `/readyz` `kb_replica_generation` reached A's generation | "
        f"{t['replica_generation']['p50_ms']} ms | {t['replica_generation']['p95_ms']} ms | "
        f"{t['replica_generation_max_ms']} ms | |",
        f"| the label request on A (teaching included) | {t['label_request']['p50_ms']} ms | "
        f"{t['label_request']['p95_ms']} ms | | |", "",
        f"Checks on B sent more than {t['bound_s']:g} s after the teach: "
        f"{t['checks_after_bound']}, of which without the taught passage (stale): "
        f"**{t['stale_after_bound']}** (target 0). Never visible: {t['never_visible']}; B's "
        f"index never caught up: {t['replica_never_caught_up']}.", ""]
    return "\n".join(lines)


def _seconds(values: list[float | None]) -> str:
    """Seconds for the report ("-": not waited for, the last kill or ``--no-rejoin``)."""
    return ", ".join("-" if v is None else f"{v:.1f} s" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--down", type=float, default=3.0, help="seconds A stays down")
    parser.add_argument("--load", type=float, default=40.0, help="seconds of check traffic")
    parser.add_argument("--name", default="replicas", help="results/<name>.md and .json")
    parser.add_argument("--kills", type=int, default=2, help="SIGKILLs: A, then B, ...")
    parser.add_argument("--no-rejoin", action="store_true", help="kill the next replica as "
                        "soon as the last one is up, before nginx sends it requests again")
    parser.add_argument("--latency", type=float, default=0.2, help="judge call seconds")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--watch", type=float, default=3.5, help="seconds B is probed")
    parser.add_argument("--poll", type=float, default=1.0, help="generation_poll_s")
    parser.add_argument("--quick", action="store_true", help="30 jobs, 3 trials, no files")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.trials = 30, 3
    result = run(args)
    print(render(result))
    if not args.quick:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
        (RESULTS / f"{args.name}.md").write_text(render(result))


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
        d = Deployment(Path(tmp), args.latency, args.poll)
        try:
            d.open()
            kill = run_kill(d, args.jobs, args.clients, args.down, finish_timeout_s=600.0,
                            load_s=args.load, kills=args.kills, rejoin=not args.no_rejoin)
            teach = run_teach(d, args.trials, args.watch)
        finally:
            d.close()
    assert d.nginx is not None
    return {"date": stamp(), "machine": machine(), "load_average_before": load_before,
            "load_average_after": load_average(), "nginx": nginx_version(d.nginx.binary),
            "command": "python " + " ".join(["benchmarks/bench_replicas.py", *sys.argv[1:]]),
            "kb": d.kb_info, "latency_s": args.latency, "kill": kill, "teach": teach,
            "met": kill["met"] and teach["met"]}


def nginx_version(binary: str) -> str:
    import subprocess

    out = subprocess.run([binary, "-v"], capture_output=True, text=True, check=False)
    return (out.stderr or out.stdout).strip().split("/")[-1]


if __name__ == "__main__":
    main()
