"""Service benchmark (issues 15, 30 and 34): what ``medverify serve`` adds to a check (and
what its metrics add), how it holds under load (answered, refused early, or late), and
whether queued jobs survive SIGKILL.

Parts (run one or several; each updates its own section of the results):

``overhead``
    ``POST /v1/check`` against the app under uvicorn in a thread
    (:class:`~medverify.testing.service.ServiceThread`) of a child process, with an
    instantly answering in-process fake judge, the rules decomposer and a small
    hash-embedder KB, against the library call ``Checker.run([answer], store=...)`` on the
    same config in this process, in the same run: N sequential requests of each,
    interleaved (one keep-alive ``httpx.Client`` per server; the response is read and parsed
    as JSON). Every request checks a new answer, so the request cache answers none. Three
    servers, each its own child process logging JSON lines at info to a file as ``medverify
    serve`` would: as served (metrics and access log on), metrics off, and both off; the
    four arms are interleaved, in a new random order each round. Targets: p50 added <= 5 ms
    (served vs library, issue 15); p50 with metrics on within 0.3 ms of metrics off (issue
    34), also given as the median of the paired differences with a bootstrap interval, and
    the metrics' own work per request timed in process.
``load-builtin``
    50 concurrent clients (closed loop: each sends its next request when it has the
    answer; one refused with 503 or 429 first sleeps its ``Retry-After``, at most 10 s)
    for ``--duration`` s against ``medverify serve`` in a subprocess
    (:class:`~medverify.testing.service.ServiceProcess`, one worker) with the built-in judge
    (the default without a model) on a hash-embedder KB of the shipped sample; one valid
    key, its rate limit raised out of the way. Counted: answers (200), early refusals
    (503 ``overloaded``, 429), late responses (a 504, or any response after
    ``queue_wait_s`` + ``request_timeout_s``), the check runs in the service's run store
    by status afterwards (``interrupted`` ones), p50/p95/p99 of the answered requests,
    time to a 503. CPU: the service's process group's CPU seconds over the load divided
    by the answers, against those of ``--lone`` sequential requests on the same server
    (before and after the load). Targets (issue 30): 0 late, 0 interrupted, loaded/lone
    CPU-s per answer <= 1.2, no other failures.
``load-llm``
    The same clients against the LLM judge at a local OpenAI-compatible fake server with
    200 ms latency (its own process), ``[llm] concurrency`` 16. Each answer is one sentence,
    one claim, so each check makes exactly one judge call (verified from the responses'
    usage and the fake server's count): ideal throughput = concurrency / latency = 80
    answers/s. Targets: within 1.2x of ideal; 0 late, 0 interrupted, no other failures.
``kill``
    ``--jobs`` check jobs (one answer each) submitted through ``POST /v1/jobs/check``; the
    server is SIGKILLed (process group) ``--kills`` times at seeded moments (once a drawn
    number of jobs have finished, the next job taken is killed a drawn delay of under half
    a judge call after it started)
    and restarted on the same store each time (``[service] stale_after_s`` 2,
    ``heartbeat_s`` 0.5, so the killed jobs are queued again quickly), until every job is
    finished. Counted: results, failures, duplicates (in a job's result, across jobs'
    results, in the run store), jobs lost (target 0), attempts, wall time.
    The judge is the LLM judge at the fake server (200 ms): the test is of the job machinery.

The clients, the fake judge server and the service share the machine's cores: on a small
machine the numbers include that contention (the load average is recorded with each part).

Usage::

    .venv/bin/python benchmarks/bench_service.py                 # every part
    .venv/bin/python benchmarks/bench_service.py overhead --requests 300
    .venv/bin/python benchmarks/bench_service.py load --duration 60 --clients 50
    .venv/bin/python benchmarks/bench_service.py kill --jobs 200 --kills 3 --seed 15
    .venv/bin/python benchmarks/bench_service.py render          # service.md from the JSON

Writes benchmarks/results/service.json (sections merged, so parts can be rerun alone) and
service.md (rendered from the JSON). The load and kill parts live in bench_service_load.py,
what the parts share in bench_service_common.py.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from bench_service_common import (
    DRUGS,
    RESULTS,
    client_key,
    load_average,
    machine,
    percentiles,
    sample_kb,
    stamp,
    verdict,
)
from bench_service_load import render_kill, render_load, run_kill, run_load_builtin, run_load_llm

from medverify.checker import Checker
from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.records import Answer, Document
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge
from medverify.testing.service import ServiceThread

PARTS = ("overhead", "load-builtin", "load-llm", "kill")


# -- 1. overhead -----------------------------------------------------------------------


def small_kb(path: Path) -> dict[str, Any]:
    docs = [Document(doc_id="metformin", title="Metformin",
                     text="Metformin is a first-line medicine for type 2 diabetes. The usual "
                     "starting dose is 500 mg once or twice daily with meals.")]
    docs += [Document(doc_id=f"doc-{i}", title=f"{DRUGS[i % len(DRUGS)]} note {i}",
                      text=f"{DRUGS[i % len(DRUGS)]} is used in adults. The usual dose is "
                      f"{10 * (i + 1)} mg daily. Side effects include nausea and headache.")
             for i in range(29)]
    with KnowledgeBase.create(path, embedder="hash") as kb:
        kb.ingest(docs)
        return {"documents": len(docs), "chunks": kb.stats().chunks, "embedder": "hash"}


def letters(n: int) -> str:
    """``n`` written in letters (0 -> "a", 26 -> "ba"): a claim that differs per request
    without a number, which the judge's exact checks would look for in the evidence (it
    stands mid-sentence: "cf." or "vs." at a sentence's end would join two sentences)."""
    out = ""
    while True:
        n, digit = divmod(n, 26)
        out = chr(ord("a") + digit) + out
        if n == 0:
            return out


def two_claim_answer(n: int) -> dict[str, str]:
    return {"question": "How is type 2 diabetes treated?",
            "text": f"In clinic {letters(n)}, metformin is a first-line medicine for type 2 "
                    "diabetes. The usual starting dose is 5000 mg daily."}


ARMS = {"full": {"metrics": True, "access_log": True},
        "metrics_off": {"metrics": False, "access_log": True},
        "bare": {"metrics": False, "access_log": False}}
"""The modes of the overhead part's server: as served (metrics and the access log on),
metrics off, and neither (what the access log line costs)."""


def _switch(app: Any, metrics: Any, mode: dict[str, bool]) -> None:
    """Put the running app in ``mode``: exactly what ``[service] metrics = false`` and
    ``access_log = false`` leave out of a request (the middleware's counting and log line,
    the claims counted after a check, the model-call observer)."""
    from medverify.llm.observe import add_observer, remove_observer
    from medverify.service.observe import RequestObserver

    layer = app.middleware_stack
    while not isinstance(layer, RequestObserver):
        layer = layer.app
    layer.metrics = metrics if mode["metrics"] else None
    layer.access_log = mode["access_log"]
    app.state.service.metrics = metrics if mode["metrics"] else None
    (add_observer if mode["metrics"] else remove_observer)(metrics)


def _overhead_server(conn: Any, config_json: str, log_path: str) -> None:
    """The overhead part's server, in its own process: the app under uvicorn in a thread
    (ServiceThread) with the instant fake judge registered here, logging JSON lines at info
    to ``log_path`` as ``medverify serve`` would to a file; switched between the modes of
    :data:`ARMS` on request (the metrics object kept aside while off)."""
    from medverify.service.logs import configure_logging

    register_fake("bench-service", ScriptedProvider(scripted_judge(keyword_rule(
        supported="first-line", contradicted="5000 mg"))))
    config = Config.model_validate_json(config_json)
    with open(log_path, "a", encoding="utf-8") as log:
        configure_logging(config.service, log)
        with ServiceThread(config) as server:
            httpx.get(server.url + "/healthz").raise_for_status()  # the middleware is built
            app = server.server.config.app  # the FastAPI app ServiceThread made
            metrics = app.state.service.metrics
            conn.send(server.url)
            tasks = server.server.server_state.tasks  # uvicorn's requests in flight
            while (mode := conn.recv()) != "stop":
                while tasks:  # the previous request's work after its response is done too
                    time.sleep(0.0001)
                _switch(app, metrics, ARMS[mode])
                conn.send(mode)
            conn.send(metrics.registry.get_sample_value("medverify_answers_checked_total",
                                                        {"source": "request"}))


def _hook_cost_us(config: Config, reports: list[Any], n: int = 20_000) -> dict[str, float]:
    """Microseconds per request of the metrics' own work, timed in this process: during the
    check (the judge call's observer) and after the response (the request counter and
    latency histogram, the claims of a 2-claim report)."""
    from medverify.llm.observe import CallEvent
    from medverify.service.metrics import Checked, ServiceMetrics

    metrics = ServiceMetrics(config)
    event = CallEvent("fake:bench-service", "judge", "ok", 0.001, 120, 80)
    start = time.perf_counter()
    for _ in range(n):
        metrics.call(event)
    during = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(n):
        metrics.request("/v1/check", "POST", 200, 0.006)
        metrics.checked(Checked.of(reports), "request")
    after = time.perf_counter() - start
    return {"during_check_us": round(1e6 * during / n, 2),
            "after_response_us": round(1e6 * after / n, 2)}


def _paired(a: list[float], b: list[float], seed: int = 34) -> dict[str, float]:
    """Median of the paired differences a - b (ms) with a 95 % bootstrap interval."""
    diff = (np.asarray(a) - np.asarray(b)) * 1000.0
    rng = np.random.default_rng(seed)
    boots = np.median(rng.choice(diff, size=(2000, diff.size)), axis=1)
    return {"median_ms": round(float(np.median(diff)), 3),
            "ci95_ms": [round(float(np.percentile(boots, 2.5)), 3),
                        round(float(np.percentile(boots, 97.5)), 3)]}


def run_overhead(work: Path, requests: int, warmup: int) -> dict[str, Any]:
    kb_info = small_kb(work / "kb")
    register_fake("bench-service", ScriptedProvider(scripted_judge(keyword_rule(
        supported="first-line", contradicted="5000 mg"))))
    base = Config(kb=work / "kb", store=work / "library.db", cache_path=work / "cache.db",
                  model="fake:bench-service", decomposer="rules",
                  service={"rate_per_minute": 100_000_000, "rate_burst": 100_000_000,
                           "log_format": "json", "log_level": "info"})
    context = multiprocessing.get_context("spawn")
    secret = client_key(work / "served.db")
    served = base.model_copy(update={"store": work / "served.db",
                                     "cache_path": work / "cache-served.db"})
    ours, theirs = context.Pipe()
    child = context.Process(target=_overhead_server, daemon=True, args=(
        theirs, served.model_dump_json(), str(work / "served.log")))
    child.start()
    loop = asyncio.new_event_loop()
    checker = Checker.from_config(base)
    store = RunStore(base.store_path)
    counter = itertools.count()
    took: dict[str, list[float]] = {arm: [] for arm in [*ARMS, "library"]}
    health_s: list[float] = []
    load_before = load_average()
    http = httpx.Client(base_url=ours.recv(), timeout=60.0,
                        headers={"Authorization": f"Bearer {secret}"})
    try:
        def via_service(arm: str) -> float:
            body = two_claim_answer(next(counter))
            ours.send(arm)  # the server switches to this arm's mode (not timed)
            assert ours.recv() == arm
            start = time.perf_counter()
            response = http.post("/v1/check", json=body)
            report = response.json()
            elapsed = time.perf_counter() - start
            assert response.status_code == 200, response.text
            assert [r["category"] for r in report["results"]] == ["FACT", "HALLUCINATION"]
            return elapsed

        def via_library() -> float:
            answer = Answer(**two_claim_answer(next(counter)))
            start = time.perf_counter()
            [report] = loop.run_until_complete(checker.run([answer], store=store))
            elapsed = time.perf_counter() - start
            assert [r.category.value for r in report.results] == ["FACT", "HALLUCINATION"]
            return elapsed

        def one(arm: str) -> float:
            return via_library() if arm == "library" else via_service(arm)

        arms = list(took)
        for _ in range(warmup):
            for arm in arms:
                one(arm)
        order = random.Random(34)
        for _ in range(requests):
            # a new order each round: each arm follows each other one as often (rotating a
            # fixed order put the same arm after the library call 3 rounds in 4)
            for arm in order.sample(arms, len(arms)):
                took[arm].append(one(arm))
            start = time.perf_counter()
            http.get("/healthz").raise_for_status()
            health_s.append(time.perf_counter() - start)
        reports = loop.run_until_complete(checker.run([Answer(**two_claim_answer(0))]))
        hook_us = _hook_cost_us(base, reports)
    finally:
        http.close()
        ours.send("stop")
        counted = ours.recv()
        child.join(30)
        store.close()
        loop.run_until_complete(checker.aclose())
        loop.close()
        unregister_fake("bench-service")
    # the switch did what it says: metrics counted the "full" checks only, and the access
    # log has a line for each check of the two arms that keep it
    logged = sum(1 for line in (work / "served.log").read_text().splitlines()
                 if '"route": "/v1/check"' in line)
    n = requests + warmup
    assert counted == n and logged == 2 * n, (counted, logged, n)
    return _overhead_summary(took, health_s, hook_us, kb_info, requests, warmup, load_before)


def _overhead_summary(took: dict[str, list[float]], health_s: list[float], hook_us: float,
                      kb_info: dict[str, Any], requests: int, warmup: int,
                      load_before: float) -> dict[str, Any]:
    p = {arm: percentiles(values) for arm, values in took.items()}
    service, library = p["full"], p["library"]
    added = round(service["p50_ms"] - library["p50_ms"], 2)
    metrics_added = round(p["full"]["p50_ms"] - p["metrics_off"]["p50_ms"], 3)
    return {
        "date": stamp(), "load_average_before": load_before, "load_average_after": load_average(),
        "kb": kb_info, "requests": requests, "warmup": warmup,
        "answer": "2 claims (rules decomposer), 1 judge call (claims_per_call 4), new text "
                  "per request",
        "servers": "one server in a child process (ServiceThread, the fake judge registered "
                   "there, JSON log lines to a file), switched before each request to its "
                   "arm's mode: as served, metrics off, metrics and access log off",
        "service": service, "library": library,
        "service_mean_ms": round(1000 * float(np.mean(took["full"])), 2),
        "library_mean_ms": round(1000 * float(np.mean(took["library"])), 2),
        "healthz_p50_ms": percentiles(health_s)["p50_ms"],
        "added_p50_ms": added,
        "added_p95_ms": round(service["p95_ms"] - library["p95_ms"], 2),
        "target_added_p50_ms": 5.0, "met": added <= 5.0,
        "metrics": {
            "arms": {arm: p[arm] | {"mean_ms": round(1000 * float(np.mean(took[arm])), 2)}
                     for arm in ARMS},
            "on_minus_off_p50_ms": metrics_added,
            "on_over_off_p50": round(p["full"]["p50_ms"] / p["metrics_off"]["p50_ms"], 4),
            "paired_on_minus_off": _paired(took["full"], took["metrics_off"]),
            "log_line_p50_ms": round(p["metrics_off"]["p50_ms"] - p["bare"]["p50_ms"], 3),
            "paired_log_line": _paired(took["metrics_off"], took["bare"]),
            "hook_cost_us": hook_us,
            "target_ms": 0.3, "met": abs(metrics_added) <= 0.3,
        },
    }


# -- report ----------------------------------------------------------------------------


def _hooks(cost: float | dict[str, float]) -> str:
    if not isinstance(cost, dict):
        return f"{cost} µs a request"
    return (f"{cost['during_check_us']} µs a request during the check (the judge call's "
            f"observer) and {cost['after_response_us']} µs after the response is sent (the "
            "request's counter and histogram, the claims of a 2-claim report)")


def render_overhead(o: dict[str, Any]) -> list[str]:
    lines = [
        f"## 1. Overhead of `POST /v1/check` ({o['date']})", "",
        f"{o['requests']} sequential requests after {o['warmup']} warm-up, interleaved "
        "with the same number of library calls (`Checker.run([answer], store=...)`) on "
        "the same config; instant in-process fake judge, rules "
        f"decomposer, hash-embedder KB of {o['kb']['documents']} short documents; "
        f"{o['answer']}. Keep-alive `httpx.Client`; the response is read and parsed.", ""]
    if "servers" in o:
        lines += [f"Servers: {o['servers']}; the library calls run in the benchmark's own "
                  "process.", ""]
    lines += [
        "| path | p50 ms | p95 ms | p99 ms | mean ms |", "|---|---|---|---|---|",
        f"| library call | {o['library']['p50_ms']} | {o['library']['p95_ms']} | "
        f"{o['library']['p99_ms']} | {o['library_mean_ms']} |"]
    m = o.get("metrics")
    if m is None:
        lines.append(f"| POST /v1/check | {o['service']['p50_ms']} | {o['service']['p95_ms']} | "
                     f"{o['service']['p99_ms']} | {o['service_mean_ms']} |")
    else:
        names = {"full": "POST /v1/check, as served (metrics + access log)",
                 "metrics_off": "POST /v1/check, `metrics = false`",
                 "bare": "POST /v1/check, `metrics = false`, `access_log = false`"}
        lines += [f"| {names[arm]} | {a['p50_ms']} | {a['p95_ms']} | {a['p99_ms']} | "
                  f"{a['mean_ms']} |" for arm, a in m["arms"].items()]
    lines += ["", f"Added at p50 (as served vs the library call): **{o['added_p50_ms']} ms** "
              f"(target <= {o['target_added_p50_ms']:g} ms: {verdict(o)}); at p95: "
              f"{o['added_p95_ms']} ms. For scale, `GET /healthz` round trip p50: "
              f"{o['healthz_p50_ms']} ms. Load average {o['load_average_before']} -> "
              f"{o['load_average_after']}.", ""]
    if m is not None:
        pair, log_pair = m["paired_on_minus_off"], m["paired_log_line"]
        lines += [
            f"Metrics on minus off at p50: **{m['on_minus_off_p50_ms']} ms** (ratio "
            f"{m['on_over_off_p50']}; target within {m['target_ms']:g} ms: {verdict(m)}); "
            f"median of the paired differences (one round each) {pair['median_ms']} ms, 95 % "
            f"bootstrap interval {pair['ci95_ms'][0]} to {pair['ci95_ms'][1]} ms. The metrics' "
            f"own work timed in process: {_hooks(m['hook_cost_us'])}. The access log line "
            f"(metrics off minus both off) at p50: {m['log_line_p50_ms']} ms, paired median "
            f"{log_pair['median_ms']} ms ({log_pair['ci95_ms'][0]} to "
            f"{log_pair['ci95_ms'][1]}).", ""]
    return lines


def render(data: dict[str, Any]) -> str:
    m = data.get("machine", {})
    lines = ["# Service benchmark (`medverify serve`, issues 15, 30 and 34)", "",
             f"Machine: {m.get('cpus')} CPU cores ({m.get('cpu_model')}), Python "
             f"{m.get('python')}, {m.get('platform')}. The clients, the service and the fake "
             "judge server share these cores; each part records the 1-minute load average "
             "before and after it (other work on the machine slows every number).", ""]
    if "overhead" in data:
        lines += render_overhead(data["overhead"])
    for name in ("load_builtin", "load_llm"):
        if name in data:
            lines += render_load(name, data[name])
    if "kill" in data:
        lines += render_kill(data["kill"])
    lines += ["Command: `.venv/bin/python benchmarks/bench_service.py` "
              "(parts: `overhead`, `load` = `load-builtin` + `load-llm`, `kill`).", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("parts", nargs="*", metavar="PART",
                        help="all (default), overhead, load (= load-builtin and load-llm), "
                        "load-builtin, load-llm, kill; or render (service.md from service.json)")
    parser.add_argument("--requests", type=int, default=300, help="overhead: requests each")
    parser.add_argument("--warmup", type=int, default=30, help="overhead: warm-up requests")
    parser.add_argument("--clients", type=int, default=50, help="load: concurrent clients")
    parser.add_argument("--duration", type=float, default=60.0, help="load: seconds per run")
    parser.add_argument("--lone", type=int, default=20,
                        help="load-builtin: sequential lone requests before and after the "
                        "load (the CPU-s per request the loaded ones are compared with)")
    parser.add_argument("--latency", type=float, default=0.2,
                        help="load-llm and kill: the fake judge's latency in seconds")
    parser.add_argument("--concurrency", type=int, default=16,
                        help="load-llm: [llm] concurrency of the service")
    parser.add_argument("--jobs", type=int, default=200, help="kill: jobs submitted")
    parser.add_argument("--kills", type=int, default=3, help="kill: SIGKILLs")
    parser.add_argument("--answers-per-job", type=int, default=1)
    parser.add_argument("--seed", type=int, default=15, help="kill: seed of the kill moments")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    out_json = args.out_dir / "service.json"
    if args.parts == ["render"]:  # service.md again from service.json
        (args.out_dir / "service.md").write_text(render(json.loads(out_json.read_text())))
        return
    parts = set(args.parts or ["all"])
    unknown = parts - {"all", "load", *PARTS}
    if unknown:
        parser.error(f"unknown part(s): {', '.join(sorted(unknown))}")
    if "all" in parts:
        parts = set(PARTS)
    if "load" in parts:
        parts |= {"load-builtin", "load-llm"}
    data = json.loads(out_json.read_text()) if out_json.exists() else {}
    data["machine"] = machine()
    with tempfile.TemporaryDirectory(prefix="bench-service-") as tmp:
        work = Path(tmp)
        kb_info: dict[str, Any] = {}
        if parts & {"load-builtin", "load-llm", "kill"}:
            kb_info = sample_kb(work / "sample-kb")
        steps: list[tuple[str, str, Callable[[], dict[str, Any]]]] = [
            ("overhead", "overhead", lambda: run_overhead(work / "overhead", args.requests,
                                                          args.warmup)),
            ("load-builtin", "load_builtin", lambda: run_load_builtin(
                work, work / "sample-kb", kb_info, args.clients, args.duration, args.lone)),
            ("load-llm", "load_llm", lambda: run_load_llm(
                work, work / "sample-kb", kb_info, args.clients, args.duration, args.latency,
                args.concurrency)),
            ("kill", "kill", lambda: run_kill(work, work / "sample-kb", kb_info, args.jobs,
                                              args.kills, args.seed, args.answers_per_job,
                                              args.latency)),
        ]
        for part, key, step in steps:
            if part not in parts:
                continue
            (work / part).mkdir(exist_ok=True)
            print(f"== {part}", file=sys.stderr, flush=True)
            data[key] = step()
            print(json.dumps(data[key], indent=2), flush=True)
            args.out_dir.mkdir(parents=True, exist_ok=True)
            out_json.write_text(json.dumps(data, indent=2) + "\n")
            (args.out_dir / "service.md").write_text(render(data))


if __name__ == "__main__":
    main()
