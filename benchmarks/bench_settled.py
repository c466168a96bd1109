"""What settling reviewed claims costs a check (issue 30, ``medverify.review.settled``).

A run store holds N closed review items (synthetic claims made of drawn medical words, one
KB lineage); for each N, :class:`~medverify.review.settled.SettledClaims` is built as a
check run builds it (one query of the closed items' normalised texts) and 200 claims are
matched (half are texts of closed items, reworded for a near-duplicate in half of those,
half are new). For scale, a one-claim check with the built-in judge on a small hash-embedder
KB is timed in the same run: the ratio says what settling adds to a check.

    .venv/bin/python benchmarks/bench_settled.py [--sizes 0 1000 10000] [--claims 200]

Writes benchmarks/results/settled.json and settled.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from medverify.checker import Checker
from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.kit import FlowKit
from medverify.records import Answer, Claim, Document
from medverify.review import ReviewItem, ReviewLabel, SettledClaims
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
LINEAGE = "kbl-bench"
_WORD_TEXT = ("statins metformin insulin aspirin lisinopril warfarin vitamin zinc iron folate "
         "lower raise reduce prevent cause treat adults children pregnancy diabetes "
         "cholesterol pressure stroke kidney liver heart bleeding fever pain dose daily "
         "weekly tablets injection risk first line therapy trial patients older")
WORDS = tuple(_WORD_TEXT.split())


def claim_text(rng: random.Random) -> str:
    words = rng.sample(WORDS, rng.randint(6, 12))
    return " ".join(words).capitalize() + "."


def fill(store: RunStore, n: int, rng: random.Random) -> list[str]:
    """N closed items (one label each); returns their claim texts."""
    queue = ReviewStore(store)
    texts = [claim_text(rng) for _ in range(n)]
    now = datetime.now(UTC)
    items = [ReviewItem(id=f"rv-{i:08d}", answer_id=f"a{i}", answer_text=t,
                        claim=Claim(id=f"c{i}", text=t), category="COVERAGE_GAP",
                        kb_lineage=LINEAGE, created_at=now) for i, t in enumerate(texts)]
    queue.add_items(items)
    for i, _ in enumerate(texts):
        queue.label(f"rv-{i:08d}", "bench", rng.choice([ReviewLabel.FACT,
                                                        ReviewLabel.HALLUCINATION]))
    return texts


def probes(texts: list[str], n: int, rng: random.Random) -> list[str]:
    out = []
    for i in range(n):
        if texts and i % 2 == 0:
            words = rng.choice(texts).rstrip(".").split()
            if i % 4 == 0 and len(words) > 6:  # a near-duplicate: one word doubled
                words.insert(3, words[3])
            out.append(" ".join(words) + ".")
        else:
            out.append(claim_text(rng))
    return out


def measure(size: int, claims: int, seed: int, work: Path) -> dict[str, Any]:
    rng = random.Random(seed)
    with RunStore(work / f"runs-{size}.db") as store:
        started = time.perf_counter()
        texts = fill(store, size, rng)
        fill_s = time.perf_counter() - started
        asked = probes(texts, claims, rng)
        loads, warm, matches, found = [], [], [], 0
        for _ in range(5):  # a checker's first run: the whole index is read
            t0 = time.perf_counter()
            settled = SettledClaims(ReviewStore(store), LINEAGE)
            loads.append(time.perf_counter() - t0)
        for _ in range(20):  # its next runs: one version query, the index kept
            t0 = time.perf_counter()
            settled = SettledClaims(ReviewStore(store), LINEAGE, index=settled.index)
            warm.append(time.perf_counter() - t0)
        for text in asked:
            t0 = time.perf_counter()
            hit = settled.match(text)
            matches.append(time.perf_counter() - t0)
            found += hit is not None
    return {"closed_items": size, "fill_s": round(fill_s, 1),
            "load_ms_median": round(1000 * statistics.median(loads), 3),
            "warm_ms_median": round(1000 * statistics.median(warm), 3),
            "match_ms_median": round(1000 * statistics.median(matches), 4),
            "match_ms_p95": round(1000 * sorted(matches)[int(0.95 * len(matches))], 4),
            "claims": len(asked), "matched": found}


def check_seconds(work: Path, repeats: int = 20) -> float:
    """Median seconds of a one-claim check with the built-in judge (no store)."""
    with KnowledgeBase.create(work / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id=f"d{i}", title="Doc", text=f"Metformin {w} adults.")
                   for i, w in enumerate(WORDS)])
        checker = Checker.from_config(Config(decomposer="rules"), kit=FlowKit(kb=kb))
        times = []
        for i in range(repeats + 2):
            t0 = time.perf_counter()
            asyncio.run(checker.run([Answer(text=f"Metformin lowers {WORDS[i]} in adults.")]))
            times.append(time.perf_counter() - t0)
        asyncio.run(checker.aclose())
    return statistics.median(times[2:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[0, 1000, 10000])
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--seed", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-settled-") as tmp:
        work = Path(tmp)
        check_s = check_seconds(work)
        rows = [measure(n, args.claims, args.seed, work) for n in args.sizes]
    for row in rows:  # a one-claim check (not the checker's first) checks the version
        row["added_to_a_one_claim_check"] = round(  # and matches once
            (row["warm_ms_median"] + row["match_ms_median"]) / (1000 * check_s), 4)
    payload = {"check_ms_median": round(1000 * check_s, 2), "rows": rows,
               "command": "python benchmarks/bench_settled.py"}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "settled.json").write_text(json.dumps(payload, indent=2) + "\n")
    lines = ["# Settling reviewed claims: the cost (issue 30)", "",
             f"A one-claim check with the built-in judge (hash KB, no store) takes "
             f"{payload['check_ms_median']} ms (median of 20) in this run. A checker reads "
             "the closed items of the KB lineage into an index at its first run (load); at "
             "each later run it asks the store whether anything closed or was reverted (warm) "
             "and reads only what closed since; each claim is then matched.", "",
             "| closed items | load ms (first run) | warm ms (later runs) | match ms/claim "
             "(median) | p95 | matched of 200 | added to a one-claim check (warm + match) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['closed_items']:,} | {r['load_ms_median']} | "
                     f"{r['warm_ms_median']} | "
                     f"{r['match_ms_median']} | {r['match_ms_p95']} | {r['matched']} of "
                     f"{r['claims']} | {100 * r['added_to_a_one_claim_check']:.1f}% |")
    lines += ["", f"Command: `{payload['command']}`", ""]
    (RESULTS / "settled.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
