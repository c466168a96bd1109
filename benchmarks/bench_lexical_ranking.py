"""Lexical ranking on a large KB: FTS5's bm25() against the stored postings (bm25 computed
in numpy, the default from 100,000 chunks when the KB holds fresh postings) and the opt-in
bounded rank query: latency of each, and how closely each agrees with bm25() on the same
query words (all after the 5,000-posting budget that selects them).

Every query is ranked the three ways, in rotating order: ``bm25`` (postings and bounded
ranking off), ``postings`` (``kb.lexical_postings_from`` = 0) and ``bounded``
(``kb.lexical_large`` = 0, postings off). Agreement with bm25's top 10, per query:

- overlap: the share of bm25's top 10 chunk ids that the other ranking's top 10 holds;
- score recall (tie-aware): the share of the other ranking's top k (k = bm25's hits, at
  most 10) whose exact bm25() score is at least bm25's k-th best score: a chunk tied
  with bm25's 10th counts, whichever of the ties either ranking kept;
- score ratio: the summed exact bm25() scores of the other ranking's top k over those of
  bm25's top k (1.0: as good a top k by bm25's own measure);
- identical: the whole ranked list (depth ``--depth``, ids and scores) equals bm25's.

The exact bm25() score of any chunk is read with ``rowid IN (...)`` on the same MATCH
expression (bm25's idf and average length are global, so the filter does not change it).

    python benchmarks/bench_lexical_ranking.py [--kb /tmp/kbscale/kb_1000000] [--queries 200]
        [--build-postings]

``--build-postings`` (re)builds the KB's stored postings first (timed; it writes into the
KB: use a copy of a KB you must not change). The KB comes from
``bench_kb_scale.py`` (1M synthetic passages). Writes benchmarks/results/lexical_ranking.
{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kb_scale import load_queries

from medverify.kb import KnowledgeBase
from medverify.kb.fts import fts_match, query_terms, select_terms

OUT = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
MODES = ("bm25", "postings", "bounded")
TOP = 10


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def set_mode(kb: KnowledgeBase, mode: str) -> None:
    kb.lexical_postings_from = 0 if mode == "postings" else None
    kb.lexical_large = 0 if mode == "bounded" else None


def exact_scores(kb: KnowledgeBase, query: str, ids: list[int]) -> dict[int, float]:
    """bm25() (negated: higher is better) of ``ids`` for the query's budgeted words."""
    if not ids:
        return {}
    terms = query_terms(query)
    terms = select_terms(terms, kb._document_frequencies(terms), kb.lexical_budget)
    marks = ",".join("?" * len(ids))
    rows = kb._conn.execute(
        f"SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid "
        f"IN ({marks})", [fts_match(terms), *ids]).fetchall()
    return {int(r): -float(s) for r, s in rows}


def agreement(kb: KnowledgeBase, query: str, exact: list[tuple[int, float]],
              other: list[tuple[int, float]]) -> dict[str, float] | None:
    top = exact[:TOP]
    if not top:
        return None
    k = len(top)
    mine = [c for c, _ in other[:k]]
    scores = exact_scores(kb, query, mine)
    kth = top[-1][1]
    tol = 1e-9 * abs(kth)
    return {"overlap": len({c for c, _ in top} & set(mine)) / k,
            "score_recall": sum(scores.get(c, 0.0) >= kth - tol for c in mine) / k,
            "score_ratio": sum(scores.get(c, 0.0) for c in mine) / sum(s for _, s in top)}


def summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {"queries": len(rows)}
    for key in ("overlap", "score_recall", "score_ratio"):
        values = [r[key] for r in rows]
        out[key] = {"mean": round(statistics.mean(values), 4),
                    "median": round(statistics.median(values), 4),
                    "min": round(min(values), 4)}
    return out


def side_table_bytes(kb: KnowledgeBase) -> int:
    """Pages of the side tables in kb.sqlite (dbstat), else their blobs' bytes."""
    try:
        return int(kb._conn.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name IN ('lexical_postings', "
            "'lexical_lengths')").fetchone()[0])
    except Exception:  # (SQLite without dbstat)
        return int(kb._conn.execute(
            "SELECT sum(length(docs) + length(tfs)) FROM lexical_postings").fetchone()[0])


def markdown(result: dict[str, Any]) -> list[str]:
    """The lines of lexical_ranking.md, from the results."""
    lat, ag = result["latency_ms"], result["agreement_with_bm25_top10"]
    load_before, load_after = result["load_before"], result["load_after"]
    build, chunks, state = result["postings_build"], result["chunks"], result["postings_state"]
    identical, default_exact = result["identical_to_bm25"], result["lexical_exact"]
    depth, kb, n_queries = result["depth"], result["kb"], result["queries"]
    busy = " (load above 3: latencies inflated)" if max(load_before[0], load_after[0]) > 3 else ""
    md = [
        "# Lexical ranking on a large KB: FTS5 bm25(), stored postings, bounded rank query",
        "",
        f"`python benchmarks/bench_lexical_ranking.py{' --build-postings' if build else ''}`: "
        f"{chunks:,} chunks ({kb}; stored postings {state}), {n_queries} real claims "
        f"(Check-COVID and Citation-Integrity dev), depth {depth}, the three rankings in "
        f"rotating order; load average {load_before[0]:.2f} before, {load_after[0]:.2f} "
        f"after{busy}.", "",
    ]
    if build:
        md += [f"Stored postings built in {build['seconds']} s (load {build['load_before'][0]:.2f}"
               f"): {build['terms']:,} tokens, {build['postings']:,} postings, "
               f"side tables {build['table_bytes'] / 1e6:.0f} MB in kb.sqlite (pages).", ""]
    md += [
        "| ranking | p50 ms | p95 ms | max ms | identical to bm25() (depth "
        f"{depth}) | top-10 overlap mean / median | score recall@10 mean / median / min "
        "| score ratio mean / min |",
        "|---|---|---|---|---|---|---|---|",
        f"| FTS5 bm25() over the budgeted words | {lat['bm25']['p50']} | {lat['bm25']['p95']} | "
        f"{lat['bm25']['max']} | | | | |",
    ]
    labels = {"postings": "stored postings (bm25 in numpy; default from 100k chunks)",
              "bounded": f"bounded rank query (opt-in; past {default_exact:,} postings)"}
    for mode, label in labels.items():
        a = ag[mode]
        md.append(f"| {label} | {lat[mode]['p50']} | {lat[mode]['p95']} | {lat[mode]['max']} "
                  f"| {identical[mode]} of {n_queries} | {a['overlap']['mean']} / "
                  f"{a['overlap']['median']} | {a['score_recall']['mean']} / "
                  f"{a['score_recall']['median']} / {a['score_recall']['min']} | "
                  f"{a['score_ratio']['mean']} / {a['score_ratio']['min']} |")
    md += ["", f"Agreement over the {ag['postings']['queries']} queries with a lexical match. "
           "Score recall counts a chunk of the other top 10 whose exact bm25() score is at "
           "least bm25's 10th best (ties with it included): the synthetic KB repeats real "
           "sentences across passages, so many scores tie and plain overlap is harsh. This "
           "measures agreement with bm25, not relevance: no labelled queries exist for the "
           "synthetic KB."]
    return md


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", type=Path, default=Path("/tmp/kbscale/kb_1000000"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--depth", type=int, default=50)
    parser.add_argument("--build-postings", action="store_true",
                        help="(re)build the KB's stored postings first")
    args = parser.parse_args(argv)
    if not args.kb.is_dir():
        print(f"no KB at {args.kb}: build it with bench_kb_scale.py", file=sys.stderr)
        return 2
    queries = load_queries(args.queries)
    build: dict[str, Any] | None = None
    with KnowledgeBase.open(args.kb) as kb:
        if args.build_postings:
            load = os.getloadavg()
            started = time.perf_counter()
            build = kb.build_lexical_postings()
            build.update(seconds=round(time.perf_counter() - started, 1), load_before=load,
                         table_bytes=side_table_bytes(kb))
            print(f"built the stored postings: {build}", file=sys.stderr)
        state = kb.lexical_postings_state()
        load_before = os.getloadavg()
        times: dict[str, list[float]] = {m: [] for m in MODES}
        agree: dict[str, list[dict[str, float]]] = {"postings": [], "bounded": []}
        identical = {"postings": 0, "bounded": 0}
        default_exact = kb.lexical_exact
        chunks = kb.stats().chunks
        for i, query in enumerate(queries):
            ranked: dict[str, list[tuple[int, float]]] = {}
            for mode in MODES[i % 3:] + MODES[:i % 3]:
                set_mode(kb, mode)
                started = time.perf_counter()
                ranked[mode] = kb.lexical_candidates(query, args.depth)
                times[mode].append((time.perf_counter() - started) * 1000)
            set_mode(kb, "bm25")
            for mode in ("postings", "bounded"):
                identical[mode] += ranked[mode] == ranked["bm25"]
                row = agreement(kb, query, ranked["bm25"], ranked[mode])
                if row is not None:
                    agree[mode].append(row)
        load_after = os.getloadavg()
    result = {
        "benchmark": "lexical_ranking", "kb": str(args.kb), "chunks": chunks,
        "queries": len(queries), "depth": args.depth, "lexical_exact": default_exact,
        "postings_state": state, "postings_build": build,
        "identical_to_bm25": identical,
        "latency_ms": {m: {"p50": pct(t, 0.5), "p95": pct(t, 0.95), "max": pct(t, 1.0)}
                       for m, t in times.items()},
        "agreement_with_bm25_top10": {m: summary(rows) for m, rows in agree.items()},
        "load_before": load_before, "load_after": load_after,
    }
    (OUT / "lexical_ranking.json").write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    md = markdown(result)
    (OUT / "lexical_ranking.md").write_text("\n".join(md) + "\n", "utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
