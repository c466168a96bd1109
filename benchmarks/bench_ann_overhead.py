"""medverify's hnswlib index against hnswlib itself, two calls at a time (issue 45 item 3).

bench_ann_peers.py times many configurations in blocks of 20 queries. This benchmark compares
two calls at a time at ONE ef (``--ef``: the ef medverify's rule gives at that size), the
one called first alternating block by block, in two cache regimes (``--cache``):

- ``cold``: block by block, each call's block started from CPU caches cleared by a write
  over ``--flush-mb`` (twice the L3 size), as bench_ann_peers.py does: a call after another
  on the SAME graph and the same queries would find their nodes in cache (the L3 of this
  machine, 260 MB, holds a whole 100k graph); the query-by-query runs before 2026-12-07
  timed each call of the same-graph pair half of the time second on a query (warm) and
  half first (cold): the p50 of such a mixture swings (1.25x then, for a wrapper of a few
  microseconds),
- ``warm``: query by query, each call timed right after an untimed call of the same query
  (the same call: a pass of every call first left the last one's nodes in the 2 MB L2, an
  edge to whichever call came last): the query's nodes in cache for both, so what differs
  is the CPU work of the calls (the wrapper's own cost in the second pair).

The calls:

- ``hnswlib peer``: ``knn_query`` on the peer's own graph (bench_ann_peers.py's
  ``hnswlib-M16C100`` build),
- ``medverify graph``: ``knn_query`` on the graph medverify built (``medverify-auto``),
- ``medverify search``: ``VectorIndex.search`` on that graph (medverify's wrapper included).

Three pairs: peer against medverify's graph (two builds of the same parameters: the graph's
share), medverify's graph against its search (the wrapper's share), and the peer against
medverify's search (the whole of issue 45's ratio). Needs both builds of bench_ann_peers.py
in ``--work``.

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
    cache_flusher,
    index_path,
    kb_connection,
    l3_mb,
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
    pairs = [("hnswlib peer", "medverify graph"), ("medverify graph", "medverify search"),
             ("hnswlib peer", "medverify search")]
    flush = cache_flusher(args.flush_mb)
    return {"n": args.n, "ef": args.ef, "flush_mb": args.flush_mb, "note": args.note,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "regimes": {cache: [interleaved({c: calls[c] for c in pair}, queries, truth, args,
                                            flush if cache == "cold" else None)
                                for pair in pairs] for cache in args.cache}}


def interleaved(calls: dict[str, Any], queries: np.ndarray, truth: np.ndarray,
                args: argparse.Namespace, flush: Any) -> dict[str, Any]:
    """Time ``calls`` on every query, ``args.rounds`` times, the first alternating by block:
    with ``flush``, a block of each call after a flush; without, query by query, each call
    timed right after an untimed call of the same query."""
    names = list(calls)
    times: dict[str, list[float]] = {n: [] for n in names}
    found: dict[str, list[Any]] = {n: [None] * len(queries) for n in names}

    def timed(name: str, i: int) -> None:
        began = time.perf_counter()
        ids = calls[name](queries[i])
        times[name].append(1000 * (time.perf_counter() - began))
        found[name][i] = ids

    load_before = round(os.getloadavg()[0], 2)
    for rnd in range(args.rounds):
        for start in range(0, len(queries), args.block):
            turn = (start // args.block + rnd) % len(names)
            block, order = range(start, min(start + args.block, len(queries))), \
                names[turn:] + names[:turn]
            if flush is not None:
                for name in order:
                    flush()
                    for i in block:
                        timed(name, i)
                continue
            for i in block:
                for name in order:
                    calls[name](queries[i])  # untimed, just before: its nodes in cache
                    timed(name, i)
    rows = {n: {**pct(times[n]), "recall_at_10": recall(found[n], truth)} for n in names}
    first = rows[names[0]]["p50"]
    for row in rows.values():
        row["p50_over_first"] = round(row["p50"] / first, 3)
    return {"rows": rows, "rounds": args.rounds,
            "queries": len(queries), "load_before": load_before,
            "load_after": round(os.getloadavg()[0], 2),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def markdown(result: dict[str, Any]) -> str:
    lines = ["# medverify's hnswlib index against hnswlib, two calls at a time", "",
             "`benchmarks/bench_ann_overhead.py --n N --ef EF` (one query thread; two calls "
             "at a time, the first alternating by block; `cold`: each call's block after a "
             "cache flush, `warm`: query by query, each call timed right after an untimed "
             "call of the same query; see its docstring). On a machine at load 10 and more "
             "the ratios are not stable (p95s of many ms are the machine's).", ""]
    for n, entry in sorted(result["sizes"].items(), key=lambda kv: int(kv[0])):
        note = f"; {entry['note']}" if entry.get("note") else ""
        lines += [f"## {int(n):,} vectors, ef {entry['ef']} ({result['machine']}{note})", ""]
        for cache, pairs in regimes(entry).items():
            flushed = f" ({entry['flush_mb']} MiB written)" if cache == "cold" else ""
            lines += [f"### {cache}{flushed}", ""]
            for pair in pairs:
                lines += pair_lines(pair)
        lines += [earlier_line(earlier) for earlier in entry.get("earlier", [])]
    return "\n".join(lines)


def regimes(entry: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """An entry's pairs by cache regime (an entry from before the regimes: one)."""
    return entry.get("regimes") or {
        "query by query, no flush, no untimed pass (before 2026-12-07)": entry["pairs"]}


def earlier_line(earlier: dict[str, Any]) -> str:
    """An earlier run at the size in one line: each pair's p50s and ratio, by regime."""
    parts = []
    for cache, pairs in regimes(earlier).items():
        ratios = [" / ".join(f"{name} {row['p50']}" for name, row in pair["rows"].items())
                  + f" ({list(pair['rows'].values())[-1]['p50_over_first']}x, load "
                  f"{pair['load_before']})" for pair in pairs]
        parts.append(f"{cache}: " + "; ".join(ratios))
    note = f", {earlier['note']}" if earlier.get("note") else ""
    date = earlier.get("date") or next(iter(regimes(earlier).values()))[0]["date"]
    return f"An earlier run ({date}{note}) p50 ms: " + ". ".join(parts) + ".\n"


def pair_lines(pair: dict[str, Any]) -> list[str]:
    lines = [f"Load {pair['load_before']} -> {pair['load_after']}, {pair['date']}:",
             "", "| call | recall@10 | p50 ms | p95 ms | mean ms | p50 / first's |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {name} | {r['recall_at_10']} | {r['p50']} | {r['p95']} | "
              f"{r['mean']} | {r['p50_over_first']} |" for name, r in pair["rows"].items()]
    return [*lines, ""]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--ef", type=int, default=128)
    parser.add_argument("--work", type=Path, default=Path("/tmp/annpeers"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--cache", nargs="+", choices=("cold", "warm"), default=["cold", "warm"])
    parser.add_argument("--flush-mb", type=int, default=2 * l3_mb(),
                        help="MiB written before each call's block (cold)")
    parser.add_argument("--note", default="", help="a note on the run, in the report")
    args = parser.parse_args(argv)
    entry = measure(args)
    out = RESULTS / "ann_overhead.json"
    result = json.loads(out.read_text()) if out.is_file() else {"sizes": {}}
    before = result["sizes"].get(str(args.n))
    if before is not None:  # kept, in one line each, under the new run
        entry["earlier"] = [*before.pop("earlier", []), before]
    result["sizes"][str(args.n)] = entry
    result["machine"] = f"{os.cpu_count()} CPUs, shared"
    out.write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "ann_overhead.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
