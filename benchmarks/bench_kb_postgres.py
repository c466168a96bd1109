"""The KB on PostgreSQL against the embedded KB, and how fast teaching reaches a replica.

On the retrieval dev sets (``../shared/data/retrieval/<name>``: the claims with the
document they were written against) the same corpus is ingested into an embedded KB (SQLite
FTS5 BM25 + faiss) and into a PostgreSQL KB on a throwaway server (the replica's in-memory
FTS5 + faiss derived from the tables, or BM25 / ts_rank_cd in SQL), with the same embedder
and chunking, and compared:

* lexical top-k overlap: per claim, the share of the embedded store's top 5 / top 10 chunks
  (by document and chunk order) that the PostgreSQL store also ranks in its top 5 / 10,
  for each lexical ranking of the PostgreSQL store (its default is ``fts5``, the
  replica's copy of the embedded store's index);
* dense top-10 overlap (the same vectors in the same index kind on both: expected 1.0);
* recall@5 / @10 of the claim's document, per mode (lexical, dense, hybrid), on both;
* search latency per claim (p50 / p95): lexical candidates at depth 50, and a whole
  hybrid search of top 7 (embedding included), on both; with ``--scale N``, also on
  CitInt's corpus copied to N passages, with the index kind each store chose, a fresh
  replica's build time from the tables and the memory its indexes hold (and its RSS
  growth), and the top-10 overlaps at that size.

The MedQuAD sample shipped with medverify (``--ray-docs`` of its documents; 0: skipped) is
ingested into an embedded KB and, through ``--ray-workers`` Ray workers, into a PostgreSQL
KB: the times, and how many chunks (text, offsets, vector bytes) are equal.

Then two store objects on one PostgreSQL database stand for two replicas: replica A
teaches a document (ingest) and later reverts it (removal); the time from A's write
returning until replica B's dense search finds (or no longer finds) it, at
``generation_poll_s`` 1.0 (the default) and 0; and whether B's index generation equals
the KB's after that.

    .venv/bin/python benchmarks/bench_kb_postgres.py [--datasets checkcovid citint]
        [--embedder hash] [--trials 20] [--scale 100000] [--ray-docs 300]
        [--ray-embedder hash] [--name kb_postgres]

Needs Debian's postgresql and psycopg (the ``database`` tests' throwaway cluster).
Writes benchmarks/results/<name>.json and <name>.md (default kb_postgres).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from medverify.config import KBSettings
from medverify.evals.retrieval import load_queries, score_mode
from medverify.files import data_dir
from medverify.kb.loaders import LoadReport, iter_documents
from medverify.kb.postgres import PostgresKB
from medverify.kb.store import KnowledgeBase
from medverify.records import Document
from medverify.retrieve import Retriever
from medverify.testing.postgres import start_cluster

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir() / "retrieval"
RESULTS = ROOT / "benchmarks" / "results"
RANKINGS = [("fts5", 1), ("ts_rank_cd", 1), ("ts_rank", 1)]
LEXICAL_DEPTH = 50  # the retriever's default candidates per list


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _ms(values: Sequence[float]) -> dict[str, float]:
    return {"p50_ms": round(1000 * statistics.median(values), 2),
            "p95_ms": round(1000 * _pct(values, 0.95), 2)}


def _keys(kb: Any, ids: Sequence[int]) -> list[tuple[str, int]]:
    found = kb.chunks(list(ids))
    return [(found[i].doc_id, found[i].order) for i in ids]


def _overlap(a: list[list[tuple[str, int]]], b: list[list[tuple[str, int]]],
             k: int) -> float:
    shares = [len(set(x[:k]) & set(y[:k])) / k for x, y in zip(a, b, strict=True) if x]
    return round(statistics.mean(shares), 4) if shares else 0.0


def _lexical_lists(kb: Any, queries: list[str]) -> tuple[list[list[tuple[str, int]]],
                                                         list[float]]:
    lists, seconds = [], []
    for query in queries:
        started = time.perf_counter()
        found = kb.lexical_candidates(query, LEXICAL_DEPTH)
        seconds.append(time.perf_counter() - started)
        lists.append(_keys(kb, [i for i, _ in found[:10]]))
    return lists, seconds


def _timed(call: Callable[[str], object], queries: list[str]) -> list[float]:
    seconds = []
    for query in queries:
        started = time.perf_counter()
        call(query)
        seconds.append(time.perf_counter() - started)
    return seconds


def compare(dataset: str, embedder: str, work: Path, url: str) -> dict[str, Any]:
    """The embedded and the PostgreSQL KB of one dataset, compared (see the docstring)."""
    folder, settings = DATA / dataset, KBSettings(embedder=embedder)
    queries = load_queries(folder / "queries_dev.jsonl")
    texts = [q.query for q in queries]
    started = time.perf_counter()
    embedded = KnowledgeBase.open_or_create(work / dataset, settings)
    embedded.ingest(iter_documents([folder / "corpus.jsonl"], LoadReport()))
    ingest_embedded = time.perf_counter() - started
    started = time.perf_counter()
    pg = PostgresKB.open(url, settings)
    pg.ingest(iter_documents([folder / "corpus.jsonl"], LoadReport()))
    ingest_pg = time.perf_counter() - started
    base, base_s = _lexical_lists(embedded, texts)
    rankings = {}
    for function, normalization in RANKINGS:
        pg.rank_function, pg.rank_normalization = function, normalization
        lists, seconds = _lexical_lists(pg, texts)
        rankings[f"{function}/{normalization}"] = {
            "overlap_at_5": _overlap(base, lists, 5), "overlap_at_10": _overlap(base, lists, 10),
            **_ms(seconds)}
    pg.rank_function, pg.rank_normalization = "fts5", 1  # the store's default
    dense = [[_keys(kb, [i for i, _ in found]) for found in kb.dense_candidates(texts, 10)]
             for kb in (embedded, pg)]
    recall = {name: {mode: score_mode(kb, queries, mode, (5, 10)).recall  # type: ignore[arg-type]
                     for mode in ("lexical", "dense", "hybrid")}
              for name, kb in (("embedded", embedded), ("postgresql", pg))}
    hybrid = {name: _ms(_timed(lambda q, kb=kb: Retriever(kb).search(q, k=7), texts))
              for name, kb in (("embedded", embedded), ("postgresql", pg))}
    result = {"dataset": dataset, "queries": len(queries), "documents": pg.counts()[0],
              "chunks": pg.counts()[1], "embedder": pg.embedder_id,
              "ingest_s": {"embedded": round(ingest_embedded, 1),
                           "postgresql": round(ingest_pg, 1)},
              "lexical": {"embedded": _ms(base_s), "postgresql": rankings},
              "dense_overlap_at_10": _overlap(dense[0], dense[1], 10),
              "recall": {name: {mode: {str(k): round(v, 4) for k, v in by_k.items()}
                                for mode, by_k in modes.items()}
                         for name, modes in recall.items()},
              "hybrid_search": hybrid}
    embedded.close()
    pg.close()
    return result


def _copies(corpus: Path, chunks: int) -> Iterator[Document]:
    """The corpus's documents again and again (ids suffixed ``#copyN``) until about
    ``chunks`` documents were given (CitInt's are one chunk each)."""
    docs = list(iter_documents([corpus], LoadReport()))
    for n in range(chunks):
        doc = docs[n % len(docs)]
        copy = n // len(docs)
        yield doc if not copy else doc.model_copy(update={"doc_id": f"{doc.doc_id}#copy{copy}"})


def _rss_mb() -> float:
    """This process's resident memory in MB (/proc/self/status VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def at_scale(chunks: int, embedder: str, work: Path, url: str) -> dict[str, Any]:
    """Search latency of both stores on CitInt's corpus copied to about ``chunks``
    passages (the dev claims as queries); the index kinds, a fresh replica's build from
    the tables and its memory, and the top-10 overlaps."""
    folder, settings = DATA / "citint", KBSettings(embedder=embedder)
    texts = [q.query for q in load_queries(folder / "queries_dev.jsonl")]
    ingest = {}
    started = time.perf_counter()
    embedded = KnowledgeBase.open_or_create(work / "scale", settings)
    embedded.ingest(_copies(folder / "corpus.jsonl", chunks))
    ingest["embedded"] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    with PostgresKB.open(url, settings) as writer:
        writer.ingest(_copies(folder / "corpus.jsonl", chunks))
    ingest["postgresql"] = round(time.perf_counter() - started, 1)
    print(f"scale {chunks}: ingested {ingest}", file=sys.stderr)
    rss, started = _rss_mb(), time.perf_counter()
    pg = PostgresKB.open(url, settings)  # a fresh replica: its indexes built from the tables
    pg.follow(force=True)
    replica = {"build_s": round(time.perf_counter() - started, 1),
               "rss_growth_mb": round(_rss_mb() - rss, 1),
               **{k: round(v / 2**20, 1) for k, v in pg.replica_memory().items()}}
    stores = {"embedded": embedded, "postgresql": pg}
    lexical = [_lexical_lists(kb, texts)[0] for kb in stores.values()]
    dense = [[_keys(kb, [i for i, _ in found]) for found in kb.dense_candidates(texts, 10)]
             for kb in stores.values()]
    exact = _exact_top10(embedded, texts)
    result: dict[str, Any] = {
        "chunks": pg.counts()[1], "queries": len(texts), "ingest_s": ingest,
        "replica": replica, "lexical_overlap_at_10": _overlap(*lexical, 10),
        "dense_overlap_at_10": _overlap(*dense, 10),
        "dense_recall_at_10_vs_exact": {"embedded": _overlap(exact, dense[0], 10),
                                        "postgresql": _overlap(exact, dense[1], 10)},
        "index": {"embedded": embedded.vector_index.current_spec().describe(),
                  "postgresql": pg.stats().index_kind}}
    for name, kb in stores.items():
        result[name] = {
            "lexical": _ms(_timed(lambda q, kb=kb: kb.lexical_candidates(q, LEXICAL_DEPTH),
                                  texts)),
            "hybrid_search": _ms(_timed(lambda q, kb=kb: Retriever(kb).search(q, k=7),
                                        texts))}
        kb.close()
    return result


def _exact_top10(kb: KnowledgeBase, texts: list[str]) -> list[list[tuple[str, int]]]:
    """The exact top 10 (by inner product over every stored vector) of each text."""
    blocks = list(kb.vector_index.stored_vectors())
    ids = np.concatenate([i for i, _ in blocks])
    vectors = np.concatenate([v for _, v in blocks])
    queries = np.asarray(kb.embedder.embed(texts), dtype=np.float32)
    out = []
    for query in queries:
        scores = vectors @ query
        top = np.argpartition(-scores, 10)[:10]
        top = top[np.argsort(-scores[top], kind="stable")]
        out.append(_keys(kb, [int(ids[j]) for j in top]))
    return out


def _stored(kb: Any) -> dict[tuple[str, int], tuple[Any, ...]]:
    """(doc_id, order) -> (text, start, end, n_tokens, vector bytes) of every chunk."""
    sql = ('SELECT d.doc_id, c.ord, c.text, c.start, c."end", c.n_tokens, c.vector FROM '
           "{chunks} c JOIN {documents} d ON d.id = c.doc")
    if isinstance(kb, PostgresKB):
        rows = kb._db.execute(sql.format(chunks="kb_chunks", documents="kb_documents"))
    else:
        rows = kb._conn.execute(sql.format(chunks="chunks", documents="documents"))
    return {(r[0], int(r[1])): (*r[2:6], bytes(r[6])) for r in rows}


def ray_ingest(docs: int, embedder: str, workers: int, work: Path, url: str) -> dict[str, Any]:
    """The MedQuAD sample's first ``docs`` documents: embedded ingest, and ingest into
    PostgreSQL through ``workers`` Ray workers; times and equal chunks."""
    from medverify.executor import RayExecutor
    from medverify.kb import sample_kb_path

    corpus = list(iter_documents([sample_kb_path()], LoadReport()))[:docs]
    settings = KBSettings(embedder=embedder)
    started = time.perf_counter()
    embedded = KnowledgeBase.open_or_create(work / "medquad", settings)
    embedded.ingest(corpus)
    embedded_s = time.perf_counter() - started
    executor = RayExecutor(num_cpus=workers)
    executor._connect()
    try:
        started = time.perf_counter()
        pg = PostgresKB.open(url, settings)
        pg.ingest(corpus, executor=executor)
        ray_s = time.perf_counter() - started
    finally:
        executor.close()
    ours, theirs = _stored(pg), _stored(embedded)
    result = {"documents": len(corpus), "chunks": len(theirs), "embedder": pg.embedder_id,
              "workers": workers, "ingest_s": {"embedded": round(embedded_s, 1),
                                               "postgresql_ray": round(ray_s, 1)},
              "equal_chunks": sum(ours.get(k) == v for k, v in theirs.items()),
              "postgresql_chunks": len(ours)}
    embedded.close()
    pg.close()
    return result


def _until(condition: Callable[[], bool], limit_s: float = 10.0,
           started: float | None = None) -> float:
    """Seconds from ``started`` (default: now) until ``condition()`` holds (inf past
    ``limit_s``), checking every 10 ms."""
    started = time.perf_counter() if started is None else started
    while not condition():
        if time.perf_counter() - started > limit_s:
            return float("inf")
        time.sleep(0.01)
    return time.perf_counter() - started


def propagation(url: str, poll_s: float, trials: int, seed: int = 0) -> dict[str, Any]:
    """Teach on A, time until B's dense search finds it; revert, time until it is gone;
    each time also until B's vector index has A's generation (B searching meanwhile)."""
    rng = random.Random(seed)
    a = PostgresKB.open(url, KBSettings(embedder="hash"))
    b = PostgresKB.open(url, KBSettings(generation_poll_s=poll_s))
    b.follow(force=True)
    times: dict[str, list[float]] = {k: [] for k in ("taught", "reverted", "taught_index",
                                                     "reverted_index")}

    def caught_up(query: str) -> bool:
        b.dense_candidates([query], 3)
        return b.replica_generation == a.generation

    for n in range(trials):
        time.sleep(rng.uniform(0, max(poll_s, 0.05)))  # a random phase against B's polls
        doc = Document(doc_id=f"review-bench-{poll_s}-{n}", title="Clinician-reviewed",
                       text=f"Statement {n} taught for the propagation benchmark zq{n}x.")
        query = f"{doc.title}\n{doc.text}"

        def found(query: str = query, doc_id: str = doc.doc_id) -> bool:
            [hits] = b.dense_candidates([query], 3)
            return any(c.doc_id == doc_id for c in b.chunks([i for i, _ in hits]).values())

        a.ingest([doc])
        started = time.perf_counter()
        times["taught"].append(_until(found))
        times["taught_index"].append(_until(lambda q=query: caught_up(q), started=started))
        time.sleep(rng.uniform(0, max(poll_s, 0.05)))
        a.remove_documents([doc.doc_id])
        started = time.perf_counter()
        times["reverted"].append(_until(lambda found=found: not found()))
        times["reverted_index"].append(_until(lambda q=query: caught_up(q), started=started))
    a.close()
    b.close()
    return {"generation_poll_s": poll_s, "trials": trials,
            **{k: {**_ms(v), "max_ms": round(1000 * max(v), 2)} for k, v in times.items()}}


def markdown(results: dict[str, Any]) -> str:
    lines = ["# KB on PostgreSQL vs the embedded KB", "",
             f"`{results['command']}` on {results['machine']} ({results['date']}).", "",
             "## Lexical top-k overlap with the embedded BM25 (dev claims)", "",
             "| dataset | chunks | PostgreSQL ranking | overlap@5 | overlap@10 | p50 ms | "
             "p95 ms | embedded p50 ms | embedded p95 ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results["datasets"]:
        base = r["lexical"]["embedded"]
        for name, row in r["lexical"]["postgresql"].items():
            lines.append(f"| {r['dataset']} | {r['chunks']} | {name} | {row['overlap_at_5']} | "
                         f"{row['overlap_at_10']} | {row['p50_ms']} | {row['p95_ms']} | "
                         f"{base['p50_ms']} | {base['p95_ms']} |")
    lines += ["", "Lexical candidates at depth 50, per claim; overlap: share of the embedded "
              "store's top k chunks also in the PostgreSQL store's top k.", "",
              "## Recall of the claim's document and hybrid search latency", "",
              "| dataset | store | lexical R@5 | dense R@5 | hybrid R@5 | hybrid R@10 | "
              "hybrid search p50 ms | p95 ms |", "|---|---|---|---|---|---|---|---|"]
    for r in results["datasets"]:
        for name, rec in r["recall"].items():
            h = r["hybrid_search"][name]
            lines.append(f"| {r['dataset']} | {name} | {rec['lexical']['5']} | "
                         f"{rec['dense']['5']} | {rec['hybrid']['5']} | {rec['hybrid']['10']} "
                         f"| {h['p50_ms']} | {h['p95_ms']} |")
        lines.append(f"| {r['dataset']} | dense top-10 overlap | {r['dense_overlap_at_10']} "
                     "| | | | | |")
    if results.get("scale"):
        lines += _scale_lines(results["scale"])
    if results.get("ray"):
        r = results["ray"]
        lines += ["", "## The MedQuAD sample ingested through Ray workers into PostgreSQL", "",
                  "| documents | chunks | embedder | Ray workers | embedded ingest s | "
                  "PostgreSQL ingest on Ray s | chunks equal (text, offsets, vector bytes) |",
                  "|---|---|---|---|---|---|---|",
                  f"| {r['documents']} | {r['chunks']} | {r['embedder']} | {r['workers']} | "
                  f"{r['ingest_s']['embedded']} | {r['ingest_s']['postgresql_ray']} | "
                  f"{r['equal_chunks']} of {r['chunks']} ({r['postgresql_chunks']} stored) |",
                  "", "Ray's start excluded; each worker embeds the embedded ingest's calls "
                  "and writes its unit in one transaction."]
    lines += ["", "## Teaching and reverting on replica A, searched on replica B", "",
              "| generation_poll_s | trials | what | found/gone p50 ms | p95 ms | max ms | "
              "B's index at A's generation p50 ms | p95 ms | max ms |",
              "|---|---|---|---|---|---|---|---|---|"]
    for p in results.get("propagation", []):
        for what in ("taught", "reverted"):
            t, v = p[what], p[f"{what}_index"]
            lines.append(f"| {p['generation_poll_s']} | {p['trials']} | {what} | "
                         f"{t['p50_ms']} | {t['p95_ms']} | {t['max_ms']} | {v['p50_ms']} | "
                         f"{v['p95_ms']} | {v['max_ms']} |")
    lines += ["", "From the return of A's ingest (or removal) until B's dense search finds "
              "the taught chunk (or no longer does), and until B's vector index has A's "
              "generation (B searching every 10 ms). B's chunks are read from the tables, "
              "so a reverted chunk is gone from B's results (its passages) at once, before "
              "B's indexes drop it.", "",
              f"Load average before / after: {results.get('load', '?')}.", ""]
    return "\n".join(lines)


def _scale_lines(scaled: list[dict[str, Any]]) -> list[str]:
    lines = ["", "## At scale (CitInt's corpus copied; its dev claims as queries)", "",
             "| passages | store | vector index | ingest s | lexical p50 ms | p95 ms | "
             "hybrid search p50 ms | p95 ms |", "|---|---|---|---|---|---|---|---|"]
    for r in scaled:
        for name in ("embedded", "postgresql"):
            lex, hyb = r[name]["lexical"], r[name]["hybrid_search"]
            lines.append(f"| {r['chunks']} | {name} | {r['index'][name]} | "
                         f"{r['ingest_s'][name]} | {lex['p50_ms']} | {lex['p95_ms']} | "
                         f"{hyb['p50_ms']} | {hyb['p95_ms']} |")
    lines += ["", "| passages | top-10 overlap lexical | dense | dense recall@10 vs exact, "
              "embedded / PostgreSQL | replica build from the tables s | replica SQLite "
              "(FTS5, postings) MB | vectors MB | RSS growth MB |",
              "|---|---|---|---|---|---|---|---|"]
    for r in scaled:
        rep, exact = r["replica"], r["dense_recall_at_10_vs_exact"]
        lines.append(f"| {r['chunks']} | {r['lexical_overlap_at_10']} | "
                     f"{r['dense_overlap_at_10']} | {exact['embedded']} / "
                     f"{exact['postgresql']} | {rep['build_s']} | {rep['lexical_bytes']} "
                     f"| {rep['vector_bytes']} | {rep['rss_growth_mb']} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["checkcovid", "citint"])
    parser.add_argument("--embedder", default="hash")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--scale", type=int, nargs="*", default=[],
                        help="Also time search on CitInt copied to these many passages.")
    parser.add_argument("--ray-docs", type=int, default=300,
                        help="MedQuAD sample documents ingested through Ray (0: skipped).")
    parser.add_argument("--ray-embedder", default="hash")
    parser.add_argument("--ray-workers", type=int, default=2)
    parser.add_argument("--name", default="kb_postgres", help="Results file name.")
    args = parser.parse_args()
    load = [Path("/proc/loadavg").read_text().split()[:3]]
    cluster = start_cluster()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            datasets = [compare(name, args.embedder, Path(tmp), cluster.create_schema())
                        for name in args.datasets]
            print(json.dumps(datasets, indent=1), file=sys.stderr)
            scaled = [at_scale(n, args.embedder, Path(tmp) / str(n), cluster.create_schema())
                      for n in args.scale]
            ray = (ray_ingest(args.ray_docs, args.ray_embedder, args.ray_workers, Path(tmp),
                              cluster.create_schema()) if args.ray_docs else None)
        spread = [propagation(cluster.create_schema(), poll, args.trials)
                  for poll in ((1.0, 0.0) if args.trials else ())]
    finally:
        cluster.remove()
    load.append(Path("/proc/loadavg").read_text().split()[:3])
    results = {"command": "python benchmarks/bench_kb_postgres.py " + " ".join(sys.argv[1:]),
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                          f"{platform.python_version()}",
               "date": time.strftime("%Y-%m-%d"), "load": " / ".join(" ".join(x) for x in load),
               "datasets": datasets, "scale": scaled, "ray": ray, "propagation": spread}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / f"{args.name}.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
