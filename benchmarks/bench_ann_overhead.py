"""medverify's hnswlib index against hnswlib itself, query by query (issue 45 item 3).

bench_ann_peers.py times each configuration in blocks of 20 queries; on a loaded machine a
block's time drifts with the load. This benchmark compares two calls at a time at ONE ef
(``--ef``: the ef medverify's rule gives at that size), query by query, the one called first
alternating block by block (a call after another on the SAME graph finds its nodes in the
cache: alternating makes that symmetric), so the load is the same for both:

- ``hnswlib peer``: ``knn_query`` on the peer's own graph (bench_ann_peers.py's
  ``hnswlib-M16C100`` build),
- ``medverify graph``: ``knn_query`` on the graph medverify built (``medverify-auto``),
- ``medverify search``: ``VectorIndex.search`` on that graph (medverify's wrapper included).

Two pairs: peer against medverify's graph (two builds of the same parameters: the graph's
share), then medverify's graph against its search (the wrapper's share). Needs both
builds of bench_ann_peers.py in ``--work``.

    .venv/bin/python benchmarks/bench_ann_overhead.py --n 100000 --ef 128
    .venv/bin/python benchmarks/bench_ann_overhead.py --n 1000000 --ef 808

Writes benchmarks/results/ann_overhead.json and .md (one entry per size).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ann_peers import (
    RESULTS,
    K,
    index_path,
    kb_connection,
    medverify_index,
    pct,
    recall,
)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import hnswlib

    work = Path(args.work)
    queries = np.load(work / "queries_200.npy")
    truth = np.load(work / f"truth_{args.n}.npy")
    peer = hnswlib.Index(space="ip", dim=queries.shape[1])
    peer.load_index(str(index_path(work, args.n, "hnswlib-M16C100")), max_elements=args.n)
    peer.set_num_threads(1)
    peer.set_ef(args.ef)
    path = index_path(work, args.n, "medverify-auto")
    mine = medverify_index(path, kb_connection(path))
    mine.ensure()
    mine.set_knobs(ef_search=args.ef)
    graph = mine.loaded.index  # the hnswlib Index under medverify's wrapper
    if graph.ef != args.ef:
        raise SystemExit(f"medverify's rule searches with ef {graph.ef} here, not {args.ef}")
    calls = {
        "hnswlib peer": lambda q: peer.knn_query(q, k=K)[0][0],
        "medverify graph": lambda q: graph.knn_query(q, k=K)[0][0],
        "medverify search": lambda q: [i for i, _ in mine.search(q[None, :], K)[0]],
    }
    pairs = [("hnswlib peer", "medverify graph"), ("medverify graph", "medverify search")]
    return {"n": args.n, "ef": args.ef,
            "pairs": [interleaved({c: calls[c] for c in pair}, queries, truth, args)
                      for pair in pairs]}


def interleaved(calls: dict[str, Any], queries: np.ndarray, truth: np.ndarray,
                args: argparse.Namespace) -> dict[str, Any]:
    names = list(calls)
    times: dict[str, list[float]] = {n: [] for n in names}
    found: dict[str, list[Any]] = {n: [None] * len(queries) for n in names}
    load_before = round(os.getloadavg()[0], 2)
    for rnd in range(args.rounds):
        for start in range(0, len(queries), args.block):
            turn = (start // args.block + rnd) % len(names)
            for i in range(start, min(start + args.block, len(queries))):
                for name in names[turn:] + names[:turn]:
                    began = time.perf_counter()
                    ids = calls[name](queries[i])
                    times[name].append(1000 * (time.perf_counter() - began))
                    found[name][i] = np.asarray(ids)
    rows = {n: {**pct(times[n]), "recall_at_10": recall(found[n], truth)} for n in names}
    first = rows[names[0]]["p50"]
    for row in rows.values():
        row["p50_over_first"] = round(row["p50"] / first, 3)
    return {"rows": rows, "rounds": args.rounds,
            "queries": len(queries), "load_before": load_before,
            "load_after": round(os.getloadavg()[0], 2),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def markdown(result: dict[str, Any]) -> str:
    lines = ["# medverify's hnswlib index against hnswlib, query by query", "",
             "`benchmarks/bench_ann_overhead.py --n N --ef EF` (one query thread; two calls "
             "at a time, interleaved query by query, the first alternating by block; see "
             "its docstring). On a machine at load 10 and more the ratios are not stable "
             "(p95s of many ms are the machine's).", ""]
    for n, entry in sorted(result["sizes"].items(), key=lambda kv: int(kv[0])):
        lines += [f"## {int(n):,} vectors, ef {entry['ef']} ({result['machine']})", ""]
        for pair in entry["pairs"]:
            lines += [f"Load {pair['load_before']} -> {pair['load_after']}, {pair['date']}:",
                      "", "| call | recall@10 | p50 ms | p95 ms | mean ms | p50 / first's |",
                      "|---|---|---|---|---|---|"]
            lines += [f"| {name} | {r['recall_at_10']} | {r['p50']} | {r['p95']} | "
                      f"{r['mean']} | {r['p50_over_first']} |"
                      for name, r in pair["rows"].items()]
            lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--ef", type=int, default=128)
    parser.add_argument("--work", type=Path, default=Path("/tmp/annpeers"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--block", type=int, default=20)
    args = parser.parse_args(argv)
    entry = measure(args)
    out = RESULTS / "ann_overhead.json"
    result = json.loads(out.read_text()) if out.is_file() else {"sizes": {}}
    result["sizes"][str(args.n)] = entry
    result["machine"] = f"{os.cpu_count()} CPUs, shared"
    out.write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "ann_overhead.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
