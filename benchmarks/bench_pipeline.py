"""Pipeline overhead and fan-out benchmark (no shared data needed).

1. Overhead per claim beyond retrieval, with an instantly answering in-process fake model:
   decomposition, prompt building, parsing, records, metrics and the run store.
   Target: <= 2 ms per claim.
2. 200 claims judged one per call against a local OpenAI-compatible server with 200 ms
   latency and concurrency 16. Ideal wall time = ceil(200 / 16) x 0.2 s = 2.6 s.
   Target: wall time <= 1.3 x ideal. The wall time includes retrieval (hash embedder), which
   the pipeline overlaps with judge calls.

Usage: python benchmarks/bench_pipeline.py [--out benchmarks/results/pipeline.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import platform
import tempfile
import time
from pathlib import Path

from medverify.checker import Checker
from medverify.config import Config, ModelSettings
from medverify.kb import KnowledgeBase, iter_documents, sample_kb_path
from medverify.kit import FlowKit
from medverify.llm.facade import Model, get_model
from medverify.records import Answer, Passage
from medverify.retrieve import Retriever
from medverify.store.runs import RunStore
from medverify.testing import FakeChatServer, ScriptedProvider
from medverify.testing.judge import keyword_rule, scripted_judge

N_CLAIMS = 200
DRUGS = [
    "metformin",
    "aspirin",
    "insulin",
    "lisinopril",
    "atorvastatin",
    "warfarin",
    "ibuprofen",
    "amoxicillin",
    "omeprazole",
    "levothyroxine",
]


def make_answer(n: int) -> Answer:
    sentences = [
        f"{DRUGS[i % len(DRUGS)].capitalize()} dose number {i} is {5 * (i + 1)} mg per day."
        for i in range(n)
    ]
    return Answer(text=" ".join(sentences), question="What are the usual doses?")


class TimedRetriever(Retriever):
    """The retrieval stage, accumulating the time spent in it."""

    seconds = 0.0

    def search_many(self, queries: list[str], k: int | None = None,
                    mode: str | None = None) -> list[list[Passage]]:
        start = time.perf_counter()
        try:
            return super().search_many(queries, k, mode)  # type: ignore[arg-type]
        finally:
            self.seconds += time.perf_counter() - start


def timed_checker(config: Config, kb: KnowledgeBase, model: Model) -> tuple[Checker,
                                                                           TimedRetriever]:
    checker = Checker.from_config(config, kit=FlowKit(kb=kb, model=model))
    timed = TimedRetriever(kb)
    checker.retriever = timed
    return checker, timed


async def overhead(kb: KnowledgeBase, store_path: Path, repeats: int = 5) -> dict[str, float]:
    rule = keyword_rule(supported="mg")
    best = math.inf
    for _ in range(repeats):
        model = Model(ScriptedProvider(scripted_judge(rule)))
        config = Config(model="fake:bench", decomposer="rules", claims_per_call=4)
        checker, timed = timed_checker(config, kb, model)
        with RunStore(store_path) as store:
            start = time.perf_counter()
            [report] = await checker.run([make_answer(N_CLAIMS)], store=store)
            total = time.perf_counter() - start
        assert len(report.results) == N_CLAIMS, len(report.results)
        best = min(best, (total - timed.seconds) / N_CLAIMS)
        retrieval = timed.seconds
    return {
        "claims": N_CLAIMS,
        "ms_per_claim_beyond_retrieval": best * 1000,
        "retrieval_s_last": retrieval,
        "target_ms": 2.0,
    }


async def fanout(
    kb: KnowledgeBase, latency: float = 0.2, concurrency: int = 16
) -> dict[str, float]:
    rule = keyword_rule(supported="mg")
    with FakeChatServer(scripted_judge(rule), delay_s=latency) as server:
        settings = ModelSettings(concurrency=concurrency, cache=False, timeout_s=30)
        model = get_model(f"openai-compatible:bench@{server.base_url}", settings)
        config = Config(model="fake:bench", decomposer="rules", claims_per_call=1)
        checker, timed = timed_checker(config, kb, model)
        start = time.perf_counter()
        [report] = await checker.run([make_answer(N_CLAIMS)])
        wall = time.perf_counter() - start
        await model.aclose()
        calls = len(server.requests)
        peak = server.max_in_flight
    ideal = math.ceil(calls / concurrency) * latency
    return {
        "claims": N_CLAIMS,
        "calls": calls,
        "latency_s": latency,
        "concurrency": concurrency,
        "max_in_flight": peak,
        "wall_s": wall,
        "ideal_s": ideal,
        "ratio": wall / ideal,
        "retrieval_s_overlapped": timed.seconds,
        "errors": report.metrics.n_errors,
        "target_ratio": 1.3,
    }


async def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        kb = KnowledgeBase.create(Path(tmp) / "kb", embedder="hash")
        kb.ingest(iter_documents([sample_kb_path()]))
        result = {
            "machine": {
                "python": platform.python_version(),
                "cpu_count": __import__("os").cpu_count(),
            },
            "kb": {"embedder": kb.embedder_id, "chunks": kb.stats().chunks},
            "overhead": await overhead(kb, Path(tmp) / "runs.db"),
            "fanout": await fanout(kb),
        }
        kb.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/pipeline.json"))
    asyncio.run(main(parser.parse_args().out))
