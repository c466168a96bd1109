"""The service's CPU per LLM answer (issue 45 item 4), by stage, before and after.

``medverify serve`` (one worker, a subprocess, as ``bench_service.py load-llm`` runs it)
checks one-claim answers with the LLM judge at a local OpenAI-compatible fake server that
answers at once (``--latency`` 0: the judge's wait costs no CPU, so CPU per answer is what
the service does around it). ``--clients`` concurrent closed-loop clients post
``/v1/check``; the server's process group's CPU seconds (``/proc``) over ``--answers``
answers, divided by the answers, is its CPU per answer. With ``--baseline-src DIR`` (the
``src`` folder of another checkout, e.g. ``git worktree add /tmp/h4_old 833dbe3``) a second
server runs that code (``PYTHONPATH``) on the same KB and fake endpoint, and the two are
measured in alternating rounds of ``--answers`` / ``--rounds`` answers each, so both see
the same machine load: the ratio is within one run. The order alternates (ABBA: each
server goes first in every other round).

Stages: after the timed rounds, one more round per server with a CPU-time sampler in the
server process (``service_cpu_sampler.py``, the server's entry point: a timer on the main
thread's CPU clock samples the event loop's stack where it spends its CPU; the thread
pool's work, the retrieval, is timed whole on its thread's clock); each sample's CPU goes
to the stage of :data:`STAGES` its stack shows (request parsing and the HTTP server, the
middleware, auth, admission, decomposition, retrieval, the LLM judge's prompt, the call
through the model facade, the HTTP client, the request cache, the judge output's parsing,
quote checks, exact checks, arbitration, run-store writes, the review queue, report
building, metrics, logs, ...), and the timed CPU per answer is split in those proportions
(so the stages add up to the measured total; the sampled round is not in it).

Guard: before the timed rounds, the same fixed answers are checked on both servers (with
``detail=full`` and the default compact response) and the responses compared byte for byte
after the fields that differ by nature are blanked (the run id, the answer's created time
when the run store stamps it, each server's store, home and port in the full report's
config); any other difference fails the benchmark.

Usage::

    git worktree add /tmp/h4_old 833dbe3
    .venv/bin/python benchmarks/bench_service_cpu.py --baseline-src /tmp/h4_old/src
    .venv/bin/python benchmarks/bench_service_cpu.py --answers 600   # this code only

Writes benchmarks/results/service_cpu.json and service_cpu.md (with ``--latency``, e.g. 0.2
as ``bench_service.py load-llm``: service_cpu_200ms.json and .md).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from bench_service_common import (
    RESULTS,
    UNLIMITED,
    client_key,
    load_average,
    machine,
    one_claim_answer,
    sample_kb,
    stamp,
)
from bench_service_load import _fake_judge_server

from medverify.testing.faults import cli_env
from medverify.testing.service import ServiceProcess, wait_healthy, wait_until

SAMPLER = Path(__file__).with_name("service_cpu_sampler.py")

STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("exact checks", ("(medverify/judge/checks/",)),
    ("quote checks", ("verify_analysis (medverify/judge/evidence.py",
                      "(medverify/judge/quotes.py")),
    ("judge output parsing", ("parse_judge_output (medverify/judge/llm.py",
                              "(medverify/judge/llm_signals.py")),
    ("LLM request cache", ("(medverify/llm/cache.py",)),
    ("LLM HTTP client", ("(medverify/llm/openai_compat.py",)),
    ("metrics", ("(medverify/service/metrics.py", "(prometheus_client/",
                 "(medverify/llm/observe.py")),
    ("logs", ("(logging/", "(medverify/service/logs.py")),
    ("model facade", ("(medverify/llm/",)),
    ("LLM judge (prompt, decision)", ("(medverify/judge/", "(medverify/prompts/")),
    ("retrieval", ("Checker.search (medverify/checker.py",
                   "Checker._retrieve (medverify/checker.py")),
    ("decomposition", ("(medverify/decompose/",)),
    ("arbitration", ("arbitrate_claims (medverify/arbitration.py",)),
    ("settled-claims lookup", ("Checker.settled_claims (medverify/checker.py",)),
    ("review queue", ("queue_for_review (medverify/service/state.py",  # before 2026-12-07
                      "ReviewStore.add_items (medverify/store/review.py",
                      "items_from_report (medverify/review/teaching.py")),
    ("report building", ("Checker.report (medverify/checker.py",
                         "(medverify/report/")),
    ("run-store writes", ("(medverify/store/", "(medverify/harness.py")),
    ("auth", ("(medverify/service/auth.py",)),
    ("jobs poller", ("(medverify/service/jobs.py",)),
    ("admission", ("(medverify/service/admission.py",)),
    ("check flow (rest)", ("(medverify/checker.py",)),
    ("audit log", ("(medverify/service/refusals.py", "audit_writes (medverify/service/app.py",
                   "_audit (medverify/service/app.py")),
    ("route: request body, dependencies, response JSON", (
        "(medverify/service/routes/", "(medverify/service/compact.py", "(fastapi/routing.py",
        "(fastapi/dependencies/")),
    ("middleware", ("(medverify/service/", "(starlette/middleware/", "(fastapi/middleware/",
                    "(starlette/_exception_handler.py")),
    ("FastAPI/Starlette (other)", ("(fastapi/", "(starlette/")),
    ("HTTP server (uvicorn)", ("(uvicorn/",)),
    ("event loop, thread pool", ("(asyncio/", "(concurrent/futures/", "(threading.py",
                                 "(anyio/")),
]
"""Stage name -> frame patterns. A sample belongs to the first stage in this order with a
frame of its stack (anywhere in it) that holds one of its patterns: the stages of the check
come before the layers around them (a retrieval sample is also inside the route, the
middleware and uvicorn's request cycle)."""

DRIVER_OFFSET = 50_000_000
"""Answer numbers of the timed rounds start here (the guard's and warm-up's are below)."""


def stage_of(frames: list[str]) -> str:
    for name, patterns in STAGES:
        if any(p in frame for frame in frames for p in patterns):
            return name
    return "other"


def read_samples(path: Path) -> Counter[str]:
    """The sampler's collapsed stacks (µs of CPU each) by stage."""
    counts: Counter[str] = Counter()
    if not path.exists():
        return counts
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            counts[stage_of(stack.split(";"))] += int(n)
    return counts


class Arm:
    """One server (this code or the baseline's) with its CPU tally and its sampler."""

    def __init__(self, name: str, server: ServiceProcess, secret: str) -> None:
        self.name, self.server, self.secret = name, server, secret
        self.cpu_s, self.system_s, self.answers, self.wall_s = 0.0, 0.0, 0, 0.0
        self.rounds: list[float] = []  # CPU ms per answer of each round
        self.samples_path: Path | None = None

    @property
    def pid(self) -> int:
        assert self.server.process is not None
        return self.server.process.pid

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}"}


async def drive(arm: Arm, numbers: range, clients: int) -> None:
    """``clients`` closed-loop clients checking the answers ``numbers`` (each once)."""
    todo = iter(numbers)

    async def client() -> None:
        async with httpx.AsyncClient(base_url=arm.server.url, headers=arm.headers(),
                                     timeout=120.0) as http:
            for n in todo:
                response = await http.post("/v1/check", json=one_claim_answer(n))
                assert response.status_code == 200, response.text

    await asyncio.gather(*(client() for _ in range(clients)))


def user_system_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of the process group ``pid`` leads (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    user = system = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pid:  # its process group; [11], [12]: utime, stime
            user, system = user + int(fields[11]), system + int(fields[12])
    return user / tick, system / tick


def timed_round(arm: Arm, numbers: range, clients: int) -> None:
    (user, system), started = user_system_s(arm.pid), time.perf_counter()
    asyncio.run(drive(arm, numbers, clients))
    user_after, system_after = user_system_s(arm.pid)
    cpu = (user_after - user) + (system_after - system)
    arm.system_s += system_after - system
    arm.wall_s += time.perf_counter() - started
    arm.cpu_s += cpu
    arm.answers += len(numbers)
    arm.rounds.append(1000 * cpu / len(numbers))


_VARYING = [(re.compile(rb'\d{8}-\d{6}-[0-9a-f]{6}'), b"RUN-ID"),
            (re.compile(rb'"created_at":"[^"]*"'), b'"created_at":"~"'),
            (re.compile(rb"arm\d"), b"arm"), (re.compile(rb'"port":\d+'), b'"port":0')]
"""What differs by nature between two servers' responses: a new run id each, the time it
was made, each server's own store, home and port (in the full report's config)."""


def blanked(body: bytes) -> bytes:
    for pattern, replacement in _VARYING:
        body = pattern.sub(replacement, body)
    return body


def guard(arms: list[Arm], n: int) -> dict[str, Any]:
    """The same ``n`` answers on every server (compact and full responses): bodies
    compared byte for byte after :func:`blanked`."""
    bodies: dict[str, list[bytes]] = {}
    for arm in arms:
        with httpx.Client(base_url=arm.server.url, headers=arm.headers(), timeout=120) as http:
            out = []
            for i in range(n):
                for detail in ("compact", "full"):
                    response = http.post("/v1/check", params={"detail": detail},
                                         json=one_claim_answer(i))
                    assert response.status_code == 200, response.text
                    out.append(blanked(response.content))
            bodies[arm.name] = out
    first = next(iter(bodies.values()))
    differing = {name: sum(a != b for a, b in zip(first, got, strict=True))
                 for name, got in bodies.items()}
    if any(differing.values()):
        name = next(k for k, v in differing.items() if v)
        a, b = next((a, b) for a, b in zip(first, bodies[name], strict=True) if a != b)
        at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                  min(len(a), len(b)))
        raise SystemExit(f"responses differ ({differing}) at byte {at}:\n"
                         f"{a[max(0, at - 300):at + 300]!r}\n{b[max(0, at - 300):at + 300]!r}")
    return {"answers": n, "responses_compared": len(first), "identical": True,
            "bytes_per_compact_response": len(first[0]), "bytes_per_full_response": len(first[1])}


class SampledService(ServiceProcess):
    """``medverify serve`` as :class:`ServiceProcess` starts it, with the CPU-time sampler of
    service_cpu_sampler.py installed in the server process (its entry point)."""

    def start(self, timeout_s: float = 120.0) -> SampledService:
        command = [sys.executable, str(SAMPLER), "serve", "--kb", str(self.kb), "--store",
                   str(self.store), "--port", str(self.port), "--workers", str(self.workers),
                   *self.args]
        env = {**os.environ, "MEDVERIFY_HOME": str(self.home), **self.env}
        assert self.log is not None
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(command, env=env, stdout=out, stderr=out,
                                            start_new_session=True)
        wait_healthy(self.url, timeout_s, process=self.process)
        return self


def start_sampling(arm: Arm) -> None:
    """The warm-up is over: the server's sampler starts from nothing."""
    os.kill(arm.pid, signal.SIGUSR1)


def stop_sampling(arm: Arm) -> None:
    """The server's sampler writes what it gathered (to ``arm.samples_path``)."""
    assert arm.samples_path is not None
    os.kill(arm.pid, signal.SIGUSR2)
    if not wait_until(arm.samples_path.exists, 30.0):
        raise SystemExit(f"the {arm.name} server wrote no samples")


def arm_result(arm: Arm) -> dict[str, Any]:
    per_answer = 1000 * arm.cpu_s / arm.answers
    samples = read_samples(arm.samples_path) if arm.samples_path else Counter()
    total = sum(samples.values())
    stages = {name: round(per_answer * count / total, 3)
              for name, count in samples.most_common()} if total else {}
    return {"answers": arm.answers, "cpu_s": round(arm.cpu_s, 2),
            "cpu_ms_per_answer": round(per_answer, 3),
            "system_cpu_ms_per_answer": round(1000 * arm.system_s / arm.answers, 3),
            "rounds_cpu_ms_per_answer": [round(r, 3) for r in arm.rounds],
            "answers_per_s": round(arm.answers / arm.wall_s, 2), "samples": total,
            "stages_cpu_ms_per_answer": stages}


def start_arm(name: str, work: Path, kb: Path, base_url: str, src: Path | None) -> Arm:
    store = work / f"{name}.db"
    secret = client_key(store)
    samples = work / f"{name}.samples.txt"
    extra = {"PYTHONPATH": str(src)} if src is not None else {}
    env = cli_env(work / f"home-{name}", **UNLIMITED, MEDVERIFY_DECOMPOSER="rules",
                  MEDVERIFY_LLM__CONCURRENCY="16", BENCH_SERVICE_CPU_SAMPLES=str(samples),
                  **extra)
    server = SampledService(kb=kb, store=store, home=work / f"home-{name}", env=env,
                            log=work / f"serve-{name}.log",
                            args=["-m", f"openai-compatible:bench@{base_url}"])
    arm = Arm(name, server.start(), secret)
    arm.samples_path = samples
    return arm


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    kb_info = sample_kb(work / "kb")
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    fake = context.Process(target=_fake_judge_server, args=(theirs, args.latency), daemon=True)
    fake.start()
    base_url = ours.recv()
    load_before = load_average()
    sources = {"this code": None}
    if args.baseline_src is not None:
        sources = {"baseline": args.baseline_src.resolve(), "this code": None}
    with ExitStack() as stack:
        arms = []
        for i, (name, src) in enumerate(sources.items()):
            arm = start_arm(f"arm{i}", work, work / "kb", base_url, src)
            stack.callback(arm.server.kill)
            arm.name = name
            arms.append(arm)
        checked = guard(arms, args.guard)
        for arm in arms:  # warm: first calls, caches, connections
            asyncio.run(drive(arm, range(10_000_000, 10_000_000 + args.warm), args.clients))
        per_round = max(1, args.answers // args.rounds)
        numbers = itertools.count(DRIVER_OFFSET, per_round)
        for round_number in range(args.rounds):
            # ABBA: each server goes first in every other round (with a fixed order, an
            # A/A run of one code on both servers favoured the second)
            for arm in arms if round_number % 2 == 0 else arms[::-1]:
                start = next(numbers)
                timed_round(arm, range(start, start + per_round), args.clients)
        for arm in arms:  # one more round each, sampled (not in the CPU counted above)
            start = next(numbers)
            start_sampling(arm)
            asyncio.run(drive(arm, range(start, start + per_round), args.clients))
            stop_sampling(arm)
        results = {arm.name: arm_result(arm) for arm in arms}
    ours.send("stop")
    served = ours.recv()
    fake.join(10)
    summary: dict[str, Any] = {
        "date": stamp(), "machine": machine(), "load_average_before": load_before,
        "load_average_after": load_average(), "kb": kb_info, "clients": args.clients,
        "judge_latency_s": args.latency, "llm_concurrency": 16, "rounds": args.rounds,
        "answers_per_round": per_round, "baseline_src": str(args.baseline_src or ""),
        "baseline_how": args.baseline_how,
        "baseline_commit": _commit(args.baseline_src), "this_commit": _commit(Path("src")),
        "guard": checked, "fake_server_calls": served["calls"], "arms": results,
        "target_cpu_ms_per_answer": 9.5,
    }
    mine = results["this code"]["cpu_ms_per_answer"]
    summary["met"] = mine < 9.5
    if "baseline" in results:
        summary["ratio_this_over_baseline"] = round(
            mine / results["baseline"]["cpu_ms_per_answer"], 3)
    return summary


def _commit(src: Path | None) -> str:
    if src is None:
        return ""
    try:
        out = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "")


def render(data: dict[str, Any]) -> str:
    m, arms = data["machine"], data["arms"]
    names = list(arms)
    lines = [
        "# The service's CPU per LLM answer, by stage (issue 45 item 4)", "",
        f"{data['date']}. Machine: {m['cpus']} CPU cores ({m['cpu_model']}), Python "
        f"{m['python']}; load average {data['load_average_before']} -> "
        f"{data['load_average_after']} (other work on these cores included).", "",
        f"`medverify serve` (1 worker, subprocess) with the LLM judge at a local "
        f"OpenAI-compatible fake server answering in {data['judge_latency_s'] * 1000:g} ms, "
        f"`[llm] concurrency` {data['llm_concurrency']}, rules decomposer, hash-embedder KB of "
        f"the shipped sample ({data['kb']['documents']} documents, {data['kb']['chunks']} "
        f"chunks); {data['clients']} closed-loop clients posting one-claim answers "
        f"(`POST /v1/check`, compact responses). CPU: the server's process group's "
        f"(/proc) over {data['rounds']} rounds of {data['answers_per_round']} answers per "
        "server, the servers alternating round by round (each first in every other "
        "round).", ""]
    if len(names) > 1:
        lines += [f"Baseline: `{data['baseline_src']}` at {data['baseline_commit']}; this "
                  f"code: {data['this_commit']}.", ""]
    lines += ["| server | answers | CPU ms per answer | rounds (CPU ms per answer) | "
              "answers/s (clients share the cores) |", "|---|---|---|---|---|"]
    for name, a in arms.items():
        lines.append(f"| {name} | {a['answers']} | **{a['cpu_ms_per_answer']}** | "
                     f"{', '.join(str(r) for r in a['rounds_cpu_ms_per_answer'])} | "
                     f"{a['answers_per_s']} |")
    lines.append("")
    if "ratio_this_over_baseline" in data:
        lines += [f"This code / baseline: **{data['ratio_this_over_baseline']}** of the CPU "
                  "per answer.", ""]
    met = "**met**" if data["met"] else "**missed**"
    lines += [f"Target (issue 45): under {data['target_cpu_ms_per_answer']} ms of CPU per "
              f"answer: {met} ({arms['this code']['cpu_ms_per_answer']} ms here, with a "
              f"{data['judge_latency_s'] * 1000:g} ms judge).", ""]
    lines += _stage_table(arms)
    g = data["guard"]
    lines += [f"Guard: {g['answers']} fixed answers checked on every server, compact and "
              f"full responses ({g['responses_compared']} each): identical byte for byte "
              "once the run id and created time are blanked.", "",
              f"Command: `{_command(data)}`.", ""]
    return "\n".join(lines)


def _command(data: dict[str, Any]) -> str:
    """The command line that makes these results (the baseline as a worktree)."""
    sizes = f"--answers {data['rounds'] * data['answers_per_round']} --rounds {data['rounds']}"
    if data.get("judge_latency_s"):
        sizes += f" --latency {data['judge_latency_s']:g} --clients {data['clients']}"
    if not data.get("baseline_src"):
        return f".venv/bin/python benchmarks/bench_service_cpu.py {sizes}"
    commit = (data.get("baseline_commit") or "COMMIT").split()[0]
    how = data.get("baseline_how") or \
        f"git worktree add {Path(data['baseline_src']).parent} {commit}"
    return (f"{how} && "
            f".venv/bin/python benchmarks/bench_service_cpu.py {sizes} "
            f"--baseline-src {data['baseline_src']}")


def _stage_table(arms: dict[str, Any]) -> list[str]:
    if not any(a["stages_cpu_ms_per_answer"] for a in arms.values()):
        return ["(No stage breakdown: the sampler gathered nothing.)", ""]
    names = list(arms)
    order = list(dict.fromkeys(s for a in arms.values() for s in a["stages_cpu_ms_per_answer"]))
    lines = ["CPU ms per answer by stage (the CPU-time sampler's shares in one more round "
             "per server, applied to the timed CPU per answer: one round's shares, so a "
             "stage's figure moves by a tenth or two of a ms between runs; the totals above "
             "are the before/after comparison; CPU µs sampled: " +
             ", ".join(f"{n} {arms[n]['samples']}" for n in names) + "):", "",
             "| stage | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for stage in order:
        cells = [str(arms[n]["stages_cpu_ms_per_answer"].get(stage, 0.0)) for n in names]
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--answers", type=int, default=1200, help="timed answers per server")
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients")
    parser.add_argument("--warm", type=int, default=100, help="warm-up answers per server")
    parser.add_argument("--guard", type=int, default=20,
                        help="fixed answers whose responses are compared across servers")
    parser.add_argument("--latency", type=float, default=0.0, help="fake judge latency (s)")
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="src folder of the code to compare with (another checkout)")
    parser.add_argument("--baseline-how", default="",
                        help="how the baseline checkout was made (shell), for the results")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    parser.add_argument("--render", action="store_true", help="the md from the json")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    args = parser.parse_args()
    name = f"service_cpu_{args.latency * 1000:g}ms" if args.latency else "service_cpu"
    out_json = args.out_dir / f"{name}.json"
    if args.render:
        (args.out_dir / f"{name}.md").write_text(render(json.loads(out_json.read_text())))
        return
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.keep:
        tmp = tempfile.mkdtemp(prefix="bench-service-cpu-")
        print(f"work folder: {tmp}", file=sys.stderr)
        data = run(args, Path(tmp))
    else:
        with tempfile.TemporaryDirectory(prefix="bench-service-cpu-") as tmp:
            data = run(args, Path(tmp))
    print(json.dumps(data, indent=2))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(data, indent=2) + "\n")
    (args.out_dir / f"{name}.md").write_text(render(data))


if __name__ == "__main__":
    main()
