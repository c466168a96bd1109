"""Throughput of the model facade: N requests through a real HTTP round trip.

Sends ``--requests`` distinct chat requests through :class:`medverify.llm.Model` to a local
:class:`FakeChatServer` that answers each after ``--latency`` seconds, with the facade's
concurrency limit set to ``--concurrency``. The ideal wall time is
``ceil(requests / concurrency) * latency``; the overhead ratio is wall / ideal (target
<= 1.3). Writes ``benchmarks/results/model_layer.json``.

    .venv/bin/python benchmarks/bench_model_layer.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from medverify.config import ModelSettings
from medverify.llm import Completion, Message, UsageLedger, get_model
from medverify.testing import FakeChatServer

RESULTS = Path(__file__).resolve().parent / "results" / "model_layer.json"


async def _fire(base_url: str, requests: int, concurrency: int,
                cache_path: Path | None = None) -> tuple[list[Completion], float, UsageLedger]:
    settings = ModelSettings(concurrency=concurrency, timeout_s=30, max_retries=0)
    ledger = UsageLedger()
    model = get_model(f"openai-compatible:bench@{base_url}", settings, ledger=ledger,
                      cache_path=cache_path)
    messages = [[Message(role="user", content=f"claim number {i}")] for i in range(requests)]
    async with model:
        await model.complete([Message(role="user", content="warm-up")], stage="warmup")
        started = time.perf_counter()
        completions = await asyncio.gather(
            *(model.complete(m, stage="bench", cache=cache_path is not None) for m in messages))
        wall = time.perf_counter() - started
    return list(completions), wall, ledger


def _cached_walls(base_url: str, requests: int, concurrency: int) -> dict[str, float]:
    """Same requests with the SQLite cache on: first pass (writes), second pass (all hits)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cache.db"
        _, cold, _ = asyncio.run(_fire(base_url, requests, concurrency, path))
        hits, warm, _ = asyncio.run(_fire(base_url, requests, concurrency, path))
    assert all(c.cached for c in hits)
    return {"cache_cold_wall_s": round(cold, 4), "cache_hit_wall_s": round(warm, 4)}


def run(requests: int, concurrency: int, latency: float) -> dict[str, Any]:
    with FakeChatServer(lambda body: "SUPPORTED", delay_s=latency) as server:
        completions, wall, ledger = asyncio.run(_fire(server.base_url, requests, concurrency))
        max_in_flight = server.max_in_flight
        cached = _cached_walls(server.base_url, requests, concurrency)
    ideal = math.ceil(requests / concurrency) * latency
    latencies = sorted(c.latency_s or 0.0 for c in completions)
    return {
        "requests": requests, "concurrency": concurrency, "server_latency_s": latency,
        "wall_s": round(wall, 4), "ideal_s": round(ideal, 4), "ratio": round(wall / ideal, 4),
        "target_ratio": 1.3, "passed": wall / ideal <= 1.3,
        "throughput_rps": round(requests / wall, 2), "server_max_in_flight": max_in_flight,
        "call_latency_p50_s": round(statistics.median(latencies), 4),
        "call_latency_p95_s": round(latencies[int(0.95 * (len(latencies) - 1))], 4),
        "usage": ledger["bench"].model_dump(), **cached,
        "python": platform.python_version(), "machine": platform.machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = run(args.requests, args.concurrency, args.latency)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
