"""A benchmark study end to end, offline: 200 questions x 3 models, 100 ms per model call.

Three scripted models under test (``medverify.testing.citers``: careful, overreaching,
freetext) answer 200 questions built from the MedQuAD sample shipped with medverify; every
call sleeps 100 ms (simulated model latency). Their cited pages are served by a local page
server and fetched through the real safe fetcher; statements are parsed by the rule
decomposer and judged by the chosen judge; the summary, report and exports are written.

Measured: wall time per phase, model calls made, the time at least one call of a model under
test was in flight (the union of call intervals) and so the share of wall time spent outside
model calls; then a rerun of the same study (every reply and audit resumed: no model call)
and ``bench report`` (everything recomputed from the records).

Ideal asking time: each model's provider allows ``[llm] concurrency`` (8) calls at once and
the three models run side by side, so max over models of ceil(calls / 8) x 0.1 s (200 calls:
2.5 s; the freetext model needs a retry on every question, 400 calls: 5 s).

    .venv/bin/python benchmarks/bench_study.py [--questions 200] [--latency 0.1]
        [--judge builtin|word] [--selection hybrid|lexical]

``--judge builtin`` is the shipped verifier (the offline default: a local model, so its time
is "outside model calls" here); ``--judge word`` is the in-process word-overlap test judge,
which leaves only the harness's own work outside the model calls.
``--selection lexical`` ranks passages by BM25 alone (``[audit] selection``): no embedding.
Writes benchmarks/results/bench_study_<judge>[_lexical].json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from medverify.bench.layout import RunLayout
from medverify.bench.records import BenchSummary
from medverify.bench.runner import BenchRunner
from medverify.bench.summary import finish_run
from medverify.config import Config
from medverify.kit import FlowKit
from medverify.testing import PageServer, register_citing_models
from medverify.testing.citers import medquad_questions, references_for
from medverify.testing.fake_provider import registered_fake
from medverify.testing.judge import WordJudge

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
HABITS = ("careful", "overreaching", "freetext")


def model_calls(labels: list[str]) -> int:
    return sum(len(registered_fake(label).requests) for label in labels)


async def one_run(config: Config, specs: dict[str, str], questions: list[Any], out: Path,
                  judge: str) -> tuple[BenchSummary, dict[str, float], float]:
    runner = BenchRunner.from_config(
        config, models=[f"{label}={spec}" for label, spec in specs.items()], run_dir=out,
        kit=FlowKit(judge=WordJudge() if judge == "word" else None))
    started = time.perf_counter()
    try:
        summary = await runner.run(questions)
    finally:
        await runner.aclose()
    return summary, dict(runner.timing), time.perf_counter() - started


def study(n_questions: int, latency: float, judge: str, selection: str) -> dict[str, Any]:
    questions = medquad_questions(n_questions)
    documents = [q.reference for q in questions if q.reference is not None]
    with tempfile.TemporaryDirectory() as tmp, PageServer.from_documents(documents) as pages:
        home = Path(tmp)
        os.environ["MEDVERIFY_HOME"] = str(home)  # no user config, cache or store involved
        specs = register_citing_models(HABITS, references_for(questions), pages.url_for,
                                       delay_s=latency, prefix="bench")
        config = Config.load(
            fetch={"allow": [pages.host_port], "cache_path": home / "fetch.db"},
            store=home / "runs.db", cache_path=home / "cache.db",
            audit={"selection": selection},
        )
        labels = list(specs)
        summary, timing, wall = asyncio.run(one_run(config, specs, questions, home / "run",
                                                    judge))
        calls = model_calls(labels)
        per_model = {label: model_calls([label]) for label in labels}
        _, _, rerun_wall = asyncio.run(
            one_run(config, specs, questions, home / "run", judge))
        rerun_calls = model_calls(labels) - calls
        started = time.perf_counter()
        finish_run(RunLayout(home / "run"), config)
        report_s = time.perf_counter() - started
        report_calls = model_calls(labels) - calls - rerun_calls
    return result(summary, timing, wall, calls, rerun_wall, rerun_calls, report_s,
                  report_calls, n_questions=len(questions), latency=latency, judge=judge,
                  selection=selection, calls_per_model=per_model)


def result(summary: BenchSummary, timing: dict[str, float], wall: float, calls: int,
           rerun_wall: float, rerun_calls: int, report_s: float, report_calls: int,
           **meta: Any) -> dict[str, Any]:
    busy = timing.get("model_busy_s", 0.0)
    concurrency = Config().llm.concurrency
    ideal_ask = max(math.ceil(n / concurrency) * meta["latency"]
                    for n in meta["calls_per_model"].values())
    overall = {label: m.model_dump(mode="json", include={
        "n_answers", "n_claims", "n_pairs", "url_validity", "statement_support",
        "response_support"}) for label, m in summary.overall.items()}
    return {
        **meta,
        "models": len(summary.models),
        "wall_s": round(wall, 2),
        "phases_s": {k: round(v, 2) for k, v in timing.items() if k.endswith("_s")},
        "model_calls": calls,
        "model_busy_s": round(busy, 2),
        "share_outside_model_calls": round(1 - busy / wall, 3) if wall else None,
        "ideal_ask_s": round(ideal_ask, 2),
        "pairs_judged": sum(m.n_pairs for m in summary.overall.values()),
        "rerun": {"wall_s": round(rerun_wall, 2), "model_calls": rerun_calls},
        "report": {"wall_s": round(report_s, 2), "model_calls": report_calls},
        "per_model": overall,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def write(data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {"machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "python": platform.python_version(),
            "command": "python benchmarks/bench_study.py " + " ".join(sys.argv[1:])}
    suffix = "_lexical" if data["selection"] == "lexical" else ""
    name = f"bench_study_{data['judge']}{suffix}"
    (RESULTS / f"{name}.json").write_text(json.dumps({**meta, **data}, indent=2) + "\n")
    phases = ", ".join(f"{k} {v} s" for k, v in data["phases_s"].items())
    lines = [
        f"# Benchmark study: {data['n_questions']} questions x {data['models']} models, "
        f"{data['latency'] * 1000:.0f} ms per model call (judge: {data['judge']}, "
        f"passage selection: {data['selection']})", "",
        f"{meta['machine']}, Python {meta['python']}; `{meta['command']}`", "",
        "| measure | value |", "|---|---|",
        f"| wall time | {data['wall_s']} s |",
        f"| phases | {phases} |",
        f"| model calls (models under test) | {data['model_calls']:,} |",
        f"| time with a model call in flight | {data['model_busy_s']} s "
        f"(ideal asking time {data['ideal_ask_s']} s) |",
        f"| share of wall time outside model calls | "
        f"{data['share_outside_model_calls'] * 100:.1f} % |",
        f"| claim-source pairs judged | {data['pairs_judged']:,} |",
        f"| rerun of the finished study | {data['rerun']['wall_s']} s, "
        f"{data['rerun']['model_calls']} model calls |",
        f"| `bench report` (recompute from records) | {data['report']['wall_s']} s, "
        f"{data['report']['model_calls']} model calls |",
        f"| peak RSS | {data['peak_rss_mb']} MB |", "",
    ]
    path = RESULTS / f"{name}.md"
    path.write_text("\n".join(lines))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--judge", choices=["builtin", "word"], default="builtin")
    parser.add_argument("--selection", choices=["hybrid", "lexical"], default="hybrid")
    args = parser.parse_args()
    data = study(args.questions, args.latency, args.judge, args.selection)
    path = write(data)
    print(path.read_text())


if __name__ == "__main__":
    main()
