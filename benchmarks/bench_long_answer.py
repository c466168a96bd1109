"""Long answers through ``POST /v1/check`` (issue 43, item 5): how many claims a second a
sync check gets through, and whether a 20-claim answer under the default limits finishes or
is refused early, never cut off by the time limit.

``medverify serve`` runs in a subprocess (one worker, the default config: built-in judge,
rules decomposer, the default ``[service]`` limits) on the demo KB (the shipped MedQuAD
sample, the default MiniLM embedder). The answers are the demo answers' expected claims, one
sentence each, numbered so no two requests are the same text.

``lone``
    One request at a time, answers of 2, 5, 10, 20 and 40 sentences, ``--repeats`` each:
    status, seconds, claims and claims/s.
``load``
    ``--clients`` closed-loop clients for ``--duration`` s; each request is a 20-sentence
    answer with probability ``--long-share``, else a 2-sentence one; a 503 ``overloaded``
    sleeps its ``Retry-After`` (at most 10 s), a 503 ``too_long`` is counted and not
    retried. Counted per kind: 200, 503 ``overloaded``, 503 ``too_long``, 504, other; late:
    a response after ``queue_wait_s + request_timeout_s``; the runs recorded
    ``interrupted``. Targets: 0 timeouts (504), 0 late, 0 interrupted.

Usage::

    .venv/bin/python benchmarks/bench_long_answer.py [--duration 90] [--clients 6]

Writes benchmarks/results/long_answer.json and long_answer.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from medverify.config import Config
from medverify.demo import build_demo_kb, demo_answers
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore
from medverify.testing.faults import cli_env
from medverify.testing.service import ServiceProcess

RESULTS = Path(__file__).parent / "results"
SIZES = (2, 5, 10, 20, 40)
UNLIMITED = {"MEDVERIFY_SERVICE__RATE_PER_MINUTE": "100000000",
             "MEDVERIFY_SERVICE__RATE_BURST": "100000000"}


def sentences() -> list[str]:
    """The demo answers' expected claims: one sentence each."""
    return [e["text"] for a in demo_answers() for e in a.meta["expected"]]


def answer(pool: list[str], n: int, serial: int) -> dict[str, str]:
    """An answer of ``n`` sentences from ``pool``, made new by ``serial``."""
    picked = [pool[(serial + i) % len(pool)] for i in range(n - 1)]
    return {"question": "What should a patient know?",
            "text": " ".join([*picked, f"This is note number {serial} of the answer."])}


def post(client: httpx.Client, body: dict[str, str]) -> tuple[int, str, float, int]:
    """(status, error code or "", seconds, claims) of one check."""
    started = time.perf_counter()
    response = client.post("/v1/check", json=body)
    took = time.perf_counter() - started
    data = response.json()
    if response.status_code == 200:
        return 200, "", took, len(data["results"])
    return response.status_code, data.get("error", {}).get("code", ""), took, 0


def run_lone(url: str, secret: str, pool: list[str], repeats: int) -> list[dict[str, Any]]:
    rows = []
    with httpx.Client(base_url=url, timeout=120.0,
                      headers={"Authorization": f"Bearer {secret}"}) as client:
        post(client, answer(pool, 2, 0))  # warm the worker (and teach it a sentence's time)
        for n in SIZES:
            for r in range(repeats):
                status, code, took, claims = post(client, answer(pool, n, 1000 * n + r))
                rows.append({"sentences": n, "status": status, "code": code,
                             "seconds": round(took, 2), "claims": claims,
                             "claims_per_s": round(claims / took, 2) if claims else None})
    return rows


async def drive(url: str, secret: str, pool: list[str], clients: int, duration_s: float,
                long_share: float, late_s: float) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    took: dict[str, list[float]] = {"long": [], "short": []}
    rng = random.Random(43)
    deadline = time.monotonic() + duration_s

    async def client(me: int, http: httpx.AsyncClient) -> None:
        serial = 10_000_000 * (me + 1)
        while time.monotonic() < deadline:
            serial += 1
            kind = "long" if rng.random() < long_share else "short"
            started = time.perf_counter()
            response = await http.post("/v1/check", json=answer(
                pool, 20 if kind == "long" else 2, serial))
            seconds = time.perf_counter() - started
            code = "" if response.status_code == 200 else response.json()["error"]["code"]
            counts[f"{kind} {response.status_code} {code}".strip()] += 1
            counts["late"] += seconds > late_s
            if response.status_code == 200:
                took[kind].append(seconds)
            if code == "overloaded":
                await asyncio.sleep(min(10.0, float(response.headers.get("Retry-After", 1))))

    async with httpx.AsyncClient(base_url=url, timeout=300.0,
                                 headers={"Authorization": f"Bearer {secret}"}) as http:
        await asyncio.gather(*(client(i, http) for i in range(clients)))
    return {"counts": dict(counts), "answered_s": {k: _percentiles(v) for k, v in took.items()}}


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"n": len(ordered), "p50": round(pick(0.5), 2), "p95": round(pick(0.95), 2),
            "max": round(ordered[-1], 2)}


def interrupted(store: Path) -> int:
    with sqlite3.connect(store) as db:
        return int(db.execute("select count(*) from runs where status = 'interrupted'")
                   .fetchone()[0])


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def render(data: dict[str, Any]) -> str:
    settings = data["settings"]
    lines = ["# Long answers through POST /v1/check", "",
             f"{data['date']}, {data['machine']}, load average {data['load_average']} at the "
             f"start. One worker, built-in judge, default limits: request_timeout_s "
             f"{settings['request_timeout_s']}, queue_wait_s {settings['queue_wait_s']}, "
             f"sync_work_share {settings['sync_work_share']}, {settings['slots']} check slots.",
             "", "Command: `.venv/bin/python benchmarks/bench_long_answer.py`", "",
             "## One request at a time", "",
             "| sentences | status | seconds | claims | claims/s |", "|---|---|---|---|---|"]
    for r in data["lone"]:
        status = f"{r['status']} {r['code']}".strip()
        lines.append(f"| {r['sentences']} | {status} | {r['seconds']} | {r['claims']} | "
                     f"{r['claims_per_s'] or '-'} |")
    load = data["load"]
    lines += ["", f"## Under load: {load['clients']} clients, {load['duration_s']} s, "
              f"{load['long_share']:.0%} of requests 20 sentences", "",
              "| outcome | requests |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(load["counts"].items())]
    lines += ["", f"Runs recorded interrupted: {load['interrupted']}. Answered latency "
              f"(s): {json.dumps(load['answered_s'])}.", "",
              f"Targets: 0 timeouts (504): {_met(load['timeouts'] == 0)} "
              f"({load['timeouts']}); 0 late: {_met(load['counts'].get('late', 0) == 0)}; "
              f"0 interrupted: {_met(load['interrupted'] == 0)}.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=90.0)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--long-share", type=float, default=0.3)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    settings = Config().service
    pool = sentences()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        build_demo_kb(work / "kb")[0].close()
        store = work / "runs.db"
        with RunStore(store) as runs:
            secret = KeyStore(runs).create("bench", Role.CLIENT).secret
        env = cli_env(work / "home", **UNLIMITED)
        load_average = round(os.getloadavg()[0], 2)
        with ServiceProcess(kb=work / "kb", store=store, home=work / "home", env=env,
                            log=work / "serve.log") as server:
            lone = run_lone(server.url, secret, pool, args.repeats)
            late_s = settings.queue_wait_s + settings.request_timeout_s
            load = asyncio.run(drive(server.url, secret, pool, args.clients, args.duration,
                                     args.long_share, late_s))
        load.update({"clients": args.clients, "duration_s": args.duration,
                     "long_share": args.long_share, "interrupted": interrupted(store),
                     "timeouts": sum(v for k, v in load["counts"].items() if " 504" in k)})
    data = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{os.cpu_count()} cores", "load_average": load_average,
            "settings": {"request_timeout_s": settings.request_timeout_s,
                         "queue_wait_s": settings.queue_wait_s,
                         "sync_work_share": settings.sync_work_share,
                         "slots": settings.max_concurrent_checks or 2 * (os.cpu_count() or 1)},
            "lone": lone, "load": load}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "long_answer.json").write_text(json.dumps(data, indent=1) + "\n")
    (RESULTS / "long_answer.md").write_text(render(data))
    print(render(data))


if __name__ == "__main__":
    main()
