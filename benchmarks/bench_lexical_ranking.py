"""The bounded lexical rank query against FTS5's bm25() on a large KB (issue 19, part 2):
latency of each, and how much of bm25's top 10 the bounded ranking keeps, on the same
query words (both after the 5,000-posting budget that selects them).

With ``[kb_settings] lexical_bounded_from`` set (opt-in), a query past ``kb.lexical_exact``
postings on a KB that large is ranked without bm25() (docs/scale.md). Here every query is
ranked both ways, the two alternating: bm25 with the bounded ranking off, the bounded query
with it on for this KB.

    python benchmarks/bench_lexical_ranking.py [--kb /tmp/kbscale/kb_1000000] [--queries 200]

The KB comes from ``bench_kb_scale.py`` (1M synthetic passages). Writes
benchmarks/results/lexical_ranking.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kb_scale import load_queries

from medverify.kb import KnowledgeBase

OUT = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", type=Path, default=Path("/tmp/kbscale/kb_1000000"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--depth", type=int, default=50)
    args = parser.parse_args(argv)
    if not args.kb.is_dir():
        print(f"no KB at {args.kb}: build it with bench_kb_scale.py", file=sys.stderr)
        return 2
    queries = load_queries(args.queries)
    load_before = os.getloadavg()
    times: dict[str, list[float]] = {"bm25": [], "bounded": []}
    overlap: list[float] = []
    bounded_used = 0
    with KnowledgeBase.open(args.kb) as kb:
        default_exact = kb.lexical_exact
        chunks = kb.stats().chunks
        for i, query in enumerate(queries):
            ranked: dict[str, list[int]] = {}
            for mode in (("bm25", "bounded") if i % 2 == 0 else ("bounded", "bm25")):
                kb.lexical_large = None if mode == "bm25" else 0
                started = time.perf_counter()
                ranked[mode] = [c for c, _ in kb.lexical_candidates(query, args.depth)]
                times[mode].append((time.perf_counter() - started) * 1000)
            if ranked["bm25"] != ranked["bounded"]:
                bounded_used += 1
            top = set(ranked["bm25"][:10])
            if top:
                overlap.append(len(top & set(ranked["bounded"][:10])) / len(top))
    result = {
        "benchmark": "lexical_ranking", "kb": str(args.kb), "chunks": chunks,
        "queries": len(queries), "depth": args.depth, "lexical_exact": default_exact,
        "queries_ranked_differently": bounded_used,
        "latency_ms": {m: {"p50": pct(t, 0.5), "p95": pct(t, 0.95)} for m, t in times.items()},
        "top10_overlap_with_bm25": {"mean": round(statistics.mean(overlap), 3),
                                    "median": round(statistics.median(overlap), 3),
                                    "queries": len(overlap)},
        "load_before": load_before, "load_after": os.getloadavg(),
    }
    (OUT / "lexical_ranking.json").write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    lat = result["latency_ms"]
    ov = result["top10_overlap_with_bm25"]
    md = [
        "# Lexical ranking on a large KB: bounded rank query vs FTS5 bm25()", "",
        f"`python benchmarks/bench_lexical_ranking.py`: {chunks:,} chunks ({args.kb}), "
        f"{len(queries)} real claims (Check-COVID and Citation-Integrity dev), depth "
        f"{args.depth}, the two rankings alternating; load average {load_before[0]:.2f} "
        f"before, {result['load_after'][0]:.2f} after.", "",
        "| ranking | p50 ms | p95 ms |", "|---|---|---|",
        f"| FTS5 bm25() over the budgeted words | {lat['bm25']['p50']} | {lat['bm25']['p95']} |",
        f"| bounded rank query (opt-in; past {default_exact:,} postings) | "
        f"{lat['bounded']['p50']} | {lat['bounded']['p95']} |", "",
        f"Queries the bounded query ranked (differently from bm25): {bounded_used} of "
        f"{len(queries)}. Share of bm25's top 10 that the bounded ranking also puts in its top "
        f"10: mean {ov['mean']}, median {ov['median']} ({ov['queries']} queries with a "
        "lexical match). This measures agreement with bm25, not relevance: no labelled "
        "queries exist for the synthetic KB.",
    ]
    (OUT / "lexical_ranking.md").write_text("\n".join(md) + "\n", "utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
