"""CPU per call of the OpenAI-compatible provider's HTTP client, with and without the pool
streams that look their socket up once (medverify.llm.http_pool; issue 45 item 4).

Two :class:`~medverify.llm.openai_compat.OpenAICompatProvider` objects in one event loop
call a local fake OpenAI-compatible server that answers at once or after ``--latency``
(its own process, so its work is not counted): ``socket once``, the provider as shipped,
and ``httpx pool``, the same provider whose client was made with
:func:`~medverify.llm.http_pool.use_socket_once` turned off (httpx's pool as before).
``--clients`` tasks keep ``--clients`` calls in flight (the service's ``[llm]
concurrency``, 16, keeps that many connections pooled); the two providers run in
alternating rounds (ABBA) of ``--calls`` / ``--rounds`` calls each, and the CPU of this
process's main thread (the event loop's: ``time.thread_time``) per call is compared within
the run. Each call is one judge-sized request (``--prompt-chars`` of passages) and the
reply's JSON is parsed, as the LLM judge's calls are.

Usage::

    .venv/bin/python benchmarks/bench_llm_http.py            # 12 rounds, 6000 calls each
    .venv/bin/python benchmarks/bench_llm_http.py --latency 0.2 --calls 1920 --rounds 8

Writes benchmarks/results/llm_http.json and llm_http.md (with ``--latency``:
llm_http_200ms.json and .md, for 0.2 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import time
from pathlib import Path
from typing import Any

from bench_service_common import RESULTS, load_average, machine, stamp

from medverify.llm import openai_compat
from medverify.llm.base import ChatRequest, Message
from medverify.llm.http_pool import SocketOnceBackend

ARMS = ("httpx pool", "socket once")


def _serve(conn: Any, latency_s: float) -> None:
    """The fake endpoint, in its own process."""
    from medverify.testing import FakeChatServer

    reply = json.dumps({"label": "supported", "quote": "passage one", "reason": "it says so"})
    with FakeChatServer(reply, delay_s=latency_s) as server:
        conn.send(server.base_url)
        conn.recv()
        conn.send(len(server.calls))


def _request(prompt_chars: int) -> ChatRequest:
    passage = "Aspirin lowers fever in adults; see the trial's results section. "
    passages = (passage * (prompt_chars // len(passage) + 1))[:prompt_chars]
    return ChatRequest(model="bench", json_mode=True, max_tokens=300, messages=(
        Message(role="system", content="You judge whether passages support a claim. " * 20),
        Message(role="user", content=f"Claim: aspirin lowers fever.\nPassages:\n{passages}")))


async def _calls(provider: openai_compat.OpenAICompatProvider, request: ChatRequest, n: int,
                 clients: int) -> float:
    """CPU seconds of this thread for ``n`` calls, ``clients`` at a time."""
    todo = iter(range(n))

    async def client() -> None:
        for _ in todo:
            await provider.complete(request)

    started = time.thread_time()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.thread_time() - started


def _providers(base_url: str, clients: int) -> dict[str, openai_compat.OpenAICompatProvider]:
    return {arm: openai_compat.OpenAICompatProvider(
        kind="openai-compatible", model="bench", base_url=base_url, max_connections=clients)
        for arm in ARMS}


async def _measure(base_url: str, args: argparse.Namespace) -> dict[str, Any]:
    request = _request(args.prompt_chars)
    providers = _providers(base_url, args.clients)
    shipped = openai_compat.use_socket_once
    openai_compat.use_socket_once = lambda client: False  # httpx's pool, as before
    try:
        await _calls(providers["httpx pool"], request, args.warm, args.clients)
    finally:
        openai_compat.use_socket_once = shipped
    await _calls(providers["socket once"], request, args.warm, args.clients)
    backends = {arm: type(p._get_client()._transport._pool._network_backend).__name__  # type: ignore[attr-defined]
                for arm, p in providers.items()}
    assert backends["socket once"] == SocketOnceBackend.__name__, backends
    assert backends["httpx pool"] != SocketOnceBackend.__name__, backends
    per_round = max(1, args.calls // args.rounds)
    rounds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for number in range(args.rounds):
        for arm in ARMS if number % 2 == 0 else ARMS[::-1]:
            cpu = await _calls(providers[arm], request, per_round, args.clients)
            rounds[arm].append(1e6 * cpu / per_round)
    for provider in providers.values():
        await provider.aclose()
    return {"backends": backends, "calls_per_round": per_round, "rounds_cpu_us_per_call": {
        arm: [round(r, 1) for r in values] for arm, values in rounds.items()}}


def run(args: argparse.Namespace) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    server = context.Process(target=_serve, args=(theirs, args.latency), daemon=True)
    server.start()
    base_url = ours.recv()
    load_before = load_average()
    try:
        measured = asyncio.run(_measure(base_url, args))
    finally:
        ours.send("stop")
        served = ours.recv()
        server.join(10)
    per_call = {arm: statistics.fmean(values)
                for arm, values in measured["rounds_cpu_us_per_call"].items()}
    ratios = [new / old for new, old in zip(measured["rounds_cpu_us_per_call"]["socket once"],
                                            measured["rounds_cpu_us_per_call"]["httpx pool"],
                                            strict=True)]
    return {"date": stamp(), "machine": machine(), "load_average_before": load_before,
            "load_average_after": load_average(), "clients": args.clients,
            "latency_s": args.latency,
            "prompt_chars": args.prompt_chars, "rounds": args.rounds, "warm": args.warm,
            "server_calls": served, **measured,
            "cpu_us_per_call": {arm: round(v, 1) for arm, v in per_call.items()},
            "ratio_socket_once_over_httpx_pool": round(per_call["socket once"]
                                                       / per_call["httpx pool"], 3),
            "round_ratios_min_median_max": [round(min(ratios), 3),
                                            round(statistics.median(ratios), 3),
                                            round(max(ratios), 3)]}


def render(data: dict[str, Any]) -> str:
    m = data["machine"]
    rows = [f"| {arm} | **{data['cpu_us_per_call'][arm]}** | "
            f"{', '.join(str(r) for r in data['rounds_cpu_us_per_call'][arm])} |"
            for arm in ARMS]
    low, median, high = data["round_ratios_min_median_max"]
    return "\n".join([
        "# The LLM HTTP client's CPU per call (issue 45 item 4)", "",
        f"{data['date']}. Machine: {m['cpus']} CPU cores ({m['cpu_model']}), Python "
        f"{m['python']}; load average {data['load_average_before']} -> "
        f"{data['load_average_after']} (other work on these cores included).", "",
        f"`OpenAICompatProvider.complete` against a local fake OpenAI-compatible server "
        f"answering in {data.get('latency_s', 0) * 1000:g} ms (its own process), "
        f"{data['clients']} calls in flight, "
        f"{data['prompt_chars']} characters of passages per request, the reply's JSON parsed; "
        f"CPU of the event loop's thread per call, {data['rounds']} alternating rounds (ABBA) "
        f"of {data['calls_per_round']} calls per provider after {data['warm']} warm-up calls "
        "each. `httpx pool`: the provider with httpx's connection pool as it comes "
        "(`use_socket_once` off); `socket once`: as shipped (the pool's streams look their "
        "socket up once, `medverify.llm.http_pool`).", "",
        "| provider | CPU µs per call | rounds (CPU µs per call) |", "|---|---|---|", *rows, "",
        f"socket once / httpx pool: **{data['ratio_socket_once_over_httpx_pool']}** of the CPU "
        f"per call (round by round: min {low}, median {median}, max {high}).", "",
        f"Command: `.venv/bin/python benchmarks/bench_llm_http.py{_options(data)}`.", ""])


def _options(data: dict[str, Any]) -> str:
    calls = data["rounds"] * data["calls_per_round"]
    return (f" --calls {calls} --rounds {data['rounds']} --warm {data['warm']}"
            f" --latency {data.get('latency_s', 0):g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=6000, help="timed calls per provider")
    parser.add_argument("--rounds", type=int, default=12, help="alternating rounds")
    parser.add_argument("--clients", type=int, default=16, help="calls in flight")
    parser.add_argument("--warm", type=int, default=200, help="warm-up calls per provider")
    parser.add_argument("--prompt-chars", type=int, default=4000)
    parser.add_argument("--latency", type=float, default=0.0,
                        help="the fake server's latency (s); 0.2 is bench_service load-llm's")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    data = run(args)
    print(json.dumps(data, indent=2))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    name = f"llm_http_{args.latency * 1000:g}ms" if args.latency else "llm_http"
    (args.out_dir / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
    (args.out_dir / f"{name}.md").write_text(render(data))


if __name__ == "__main__":
    main()
