"""A KB of a million passages: build, disk, memory, search latency and ANN recall.

Stages run as child processes of this script (so each one's peak RSS is its own):

1. ``corpus``: ``make_large_corpus.py`` writes N synthetic passages (shuffled real
   sentences, labelled synthetic).
2. ``ingest``: the real ingest path (``KnowledgeBase.ingest``) with the ``hash-384``
   embedder (MiniLM runs ~30 passages/s on these 2 cores: 1M would take ~9 h).
3. ``reindex``: the approximate index the KB chooses by size (IVF-flat above 100k), trained
   and saved, then reloaded memory-mapped.
4. ``search``: 200 real queries (Check-COVID and Citation-Integrity claims); dense exact
   (flat scan) vs IVF at several nprobe; lexical (the default ranking: the KB's stored
   postings, built first when not fresh; ``--lexical-postings-from none`` for FTS5
   bm25()); hybrid (RRF); recall@10 of the approximate dense top 10 against the exact one.
   Query embedding excluded (vectors are computed first; the timed search reads them from
   a cache).
5. ``minilm``: the same index types over real MiniLM geometry: a pool of real sentences
   embedded with all-MiniLM-L6-v2, each synthetic passage's vector the normalised mean
   of its sentences' vectors (1M passages), plus directly embedded passages at a small
   size. Index-level recall and latency (no SQLite).

    .venv/bin/python benchmarks/bench_kb_scale.py [--n 1000000] [--work /tmp/kbscale]

``--search-only`` reruns the search stage alone on the KB already in ``--work`` and merges
it into the results (the earlier search kept as ``search_previous``).

Writes benchmarks/results/kb_scale.json and kb_scale.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kb_scale_report import markdown  # noqa: E402 (the report, beside this file)

DATA = data_dir()
RESULTS = ROOT / "benchmarks" / "results"
EMBEDDER = "hash-384"


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def dir_bytes(path: Path) -> dict[str, int]:
    return {f.name: f.stat().st_size for f in sorted(path.iterdir()) if f.is_file()}


def pct(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {"p50": 0.0, "p95": 0.0}
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50": round(statistics.median(ordered), 3), "p95": round(at(0.95), 3)}


def load_queries(n: int) -> list[str]:
    """Real claims: half Check-COVID, half Citation-Integrity (dev splits)."""
    out: list[str] = []
    for name in ("checkcovid", "citint"):
        path = DATA / "retrieval" / name / "queries_dev.jsonl"
        rows = [json.loads(line)["query"] for line in path.open(encoding="utf-8")]
        out += list(dict.fromkeys(rows))[: n // 2]
    return out[:n]


# ---- stages (child processes) -------------------------------------------------------------


def stage_corpus(args: argparse.Namespace) -> dict[str, Any]:
    from make_large_corpus import write_corpus

    return write_corpus(Path(args.corpus), args.n, args.seed)


def stage_ingest(args: argparse.Namespace) -> dict[str, Any]:
    from medverify.config import KBSettings
    from medverify.kb import KnowledgeBase
    from medverify.kb.loaders import iter_sources

    kb_dir = Path(args.kb)
    started = time.perf_counter()
    timeline: list[dict[str, float]] = []
    step = max(1, args.n // 10)

    def progress(stats: Any) -> None:
        if stats.documents_seen % step == 0 and (not timeline or timeline[-1]["documents"]
                                                 != stats.documents_seen):
            timeline.append({"documents": stats.documents_seen,
                             "seconds": round(time.perf_counter() - started, 1),
                             "rss_mb": rss_mb()})

    with KnowledgeBase.create(kb_dir, KBSettings(embedder=EMBEDDER)) as kb:
        stats = kb.ingest(iter_sources([Path(args.corpus)]), progress=progress)
        counts = kb.stats()
    return {"seconds": round(time.perf_counter() - started, 1), "documents": counts.documents,
            "chunks": counts.chunks, "peak_rss_mb": peak_mb(), "files": dir_bytes(kb_dir),
            "timeline": timeline, "stats": stats.model_dump()}


def _raw_hash(texts: Sequence[str], dim: int) -> np.ndarray:
    """hash-N feature vectors before normalisation (signed feature counts)."""
    from medverify.kb.embed_base import HashEmbedder, _features

    emb = HashEmbedder(dim)
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for feature in _features(text):
            index, sign = emb._slot(feature)
            out[row, index] += sign
    return out


def write_rows(conn: Any, pool: Any, plans: Sequence[tuple[int, list[int]]], first: int,
               vectors: np.ndarray, terms: dict[str, int]) -> None:
    """One block of synthetic passages (``plans``: home document and sentence ids, the
    first one numbered ``first``) into the KB schema, counting their terms into ``terms``."""
    from make_large_corpus import SYNTHETIC_SOURCE

    from medverify.kb.fts import chunk_terms
    from medverify.kb.ingest import document_hash
    from medverify.records import Document

    doc_rows, chunk_rows, fts_rows = [], [], []
    for j, (home, chosen) in enumerate(plans):
        i = first + j
        title = pool.docs[home].title
        text = " ".join(pool.sentences[s] for s in chosen)
        meta = {"synthetic": True, "title_from": pool.docs[home].origin}
        doc = Document(doc_id=f"synthetic:{i:08d}", title=title, text=text,
                       source=SYNTHETIC_SOURCE, meta=meta)
        doc_rows.append((i + 1, doc.doc_id, document_hash(doc), title, None,
                         SYNTHETIC_SOURCE, json.dumps(meta), 1, time.time()))
        chunk_rows.append((i + 1, i + 1, 0, text, 0, len(text), len(text.split()),
                           vectors[j].tobytes()))
        fts_rows.append((i + 1, title, text))
        for term in chunk_terms(title, text):
            terms[term] = terms.get(term, 0) + 1
    with conn:
        conn.executemany("INSERT INTO documents (id, doc_id, content_hash, title, url, "
                         "source, meta, n_chunks, added_at) VALUES (?,?,?,?,?,?,?,?,?)",
                         doc_rows)
        conn.executemany('INSERT INTO chunks (id, doc, ord, text, start, "end", n_tokens, '
                         "vector) VALUES (?,?,?,?,?,?,?,?)", chunk_rows)
        conn.executemany("INSERT INTO chunks_fts (rowid, title, body) VALUES (?,?,?)",
                         fts_rows)


def finish_kb(conn: Any, terms: dict[str, int]) -> None:
    """After the last block: the term counts, a new KB generation, the WAL checkpointed,
    the connection closed."""
    with conn:
        conn.executemany("INSERT INTO terms (term, df) VALUES (?, ?)", terms.items())
        conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key='generation'")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def stage_build(args: argparse.Namespace) -> dict[str, Any]:
    """A KB of N synthetic passages written straight into the KB schema (documents, chunks
    with vectors, FTS5 rows, term counts), one chunk per passage. Vectors: hash-384 of
    title + text, computed as the sum of its sentences' (and title's) feature vectors,
    normalised: hash-384 of the whole text except the word bigrams across sentence
    boundaries. The ingest path is not used (see the ``ingest`` stage for its rate)."""
    from make_large_corpus import load_pool, passage_plans

    from medverify.config import KBSettings
    from medverify.kb import KnowledgeBase
    from medverify.kb.database import connect
    from medverify.kb.embed_base import normalize

    started = time.perf_counter()
    pool = load_pool()
    dim = int(EMBEDDER.split("-")[1])
    sentence_raw = _raw_hash(pool.sentences, dim)
    title_raw = _raw_hash([d.title for d in pool.docs], dim)
    prepared = time.perf_counter() - started
    kb_dir = Path(args.kb)
    KnowledgeBase.create(kb_dir, KBSettings(embedder=EMBEDDER)).close()
    conn = connect(kb_dir / "kb.sqlite")
    terms: dict[str, int] = {}
    block = 20_000
    plans = passage_plans(pool, args.n, args.seed)
    written = 0
    while written < args.n:
        batch = [next(plans) for _ in range(min(block, args.n - written))]
        flat = np.fromiter((s for _, chosen in batch for s in chosen), dtype=np.int64)
        offsets = np.cumsum([0] + [len(c) for _, c in batch[:-1]])
        sums = np.add.reduceat(sentence_raw[flat], offsets, axis=0)
        sums += title_raw[[home for home, _ in batch]]
        vectors = normalize(sums)
        write_rows(conn, pool, batch, written, vectors, terms)
        written += len(batch)
        if written % 200_000 == 0 or written == args.n:
            print(f"built {written} in {time.perf_counter() - started:.0f}s, RSS {rss_mb()} MB",
                  file=sys.stderr, flush=True)
    finish_kb(conn, terms)
    return {"seconds": round(time.perf_counter() - started, 1),
            "hash_prepare_s": round(prepared, 1), "passages": args.n,
            "pool_sentences": len(pool.sentences), "peak_rss_mb": peak_mb(),
            "files": dir_bytes(kb_dir)}


def stage_reindex(args: argparse.Namespace) -> dict[str, Any]:
    """The KB's own choice by size (auto: IVF-flat at 1M), rebuilt from SQLite and saved;
    then the flat (exact) index written beside it for the baseline; then a reopen."""
    import faiss

    from medverify.kb import KnowledgeBase
    from medverify.kb.index import IndexSpec

    kb_dir = Path(args.kb)
    out: dict[str, Any] = {}
    with KnowledgeBase.open(kb_dir) as kb:
        started = time.perf_counter()
        spec = kb.rebuild_index(args.index or None)
        out["approximate"] = {"spec": spec.describe(), "seconds":
                              round(time.perf_counter() - started, 1),
                              "file_bytes": (kb_dir / "vectors.faiss").stat().st_size,
                              "peak_rss_mb": peak_mb()}
        started = time.perf_counter()
        flat = kb.vector_index._build(IndexSpec("flat"))
        faiss.write_index(flat, str(Path(args.work) / f"flat_{args.n}.faiss"))
        out["flat"] = {"seconds": round(time.perf_counter() - started, 1),
                       "file_bytes": (Path(args.work) / f"flat_{args.n}.faiss").stat().st_size}
        del flat
    started = time.perf_counter()
    with KnowledgeBase.open(kb_dir) as kb:
        kb.vector_index.ensure()
        out["reopen"] = {"seconds": round(time.perf_counter() - started, 3),
                         "mapped": kb.vector_index.mapped, "rss_mb": rss_mb(),
                         "stats": kb.stats().model_dump()}
    return out


class CachedEmbedder:
    """The KB's embedder with the benchmark queries' vectors computed up front, so the
    timed searches exclude query embedding (a dictionary look-up)."""

    def __init__(self, inner: Any, texts: Sequence[str]) -> None:
        self.id, self.dim, self.tokenizer = inner.id, inner.dim, inner.tokenizer
        self.vectors = dict(zip(texts, inner.embed(list(texts)), strict=True))
        started = time.perf_counter()
        for text in texts[:50]:
            inner.embed([text])
        self.embed_ms = 1000 * (time.perf_counter() - started) / max(1, min(50, len(texts)))

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts])


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return 1000 * (time.perf_counter() - started), value


def _memory() -> dict[str, float]:
    out = {}
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            key = line.split(":")[0]
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = round(int(line.split()[1]) / 1024, 1)
    return out


def recall_at(approx: np.ndarray, exact: np.ndarray, k: int = 10) -> float:
    hits = [len(set(a[:k]) & set(e[:k]) - {-1}) / k for a, e in zip(approx, exact, strict=True)]
    return round(float(np.mean(hits)), 4)


def sweep(index: Any, queries: np.ndarray, truth: np.ndarray, kind: str,
          values: Sequence[int]) -> list[dict[str, Any]]:
    """Per parameter value: single-query latency (one thread) and recall@10 vs ``truth``."""
    import faiss

    from medverify.kb.index import faiss_search

    rows = []
    for value in values:
        if kind in ("ivf", "ivfpq"):
            faiss.extract_index_ivf(index).nprobe = value
        else:
            faiss.downcast_index(index.index).hnsw.efSearch = value
        times, found = [], []
        for q in queries:
            ms, (_, ids) = _timed(lambda q=q: faiss_search(index, q[None], 50))
            times.append(ms)
            found.append(ids[0])
        rows.append({"param": value, **pct(times),
                     "recall_at_10": recall_at(np.array(found), truth)})
    return rows


def exact_truth(flat: Any, queries: np.ndarray) -> tuple[np.ndarray, list[float]]:
    from medverify.kb.index import faiss_search

    times, found = [], []
    for q in queries:
        ms, (_, ids) = _timed(lambda q=q: faiss_search(flat, q[None], 50))
        times.append(ms)
        found.append(ids[0])
    return np.array(found), times


def stage_search(args: argparse.Namespace) -> dict[str, Any]:
    import faiss

    from medverify.config import KBSettings
    from medverify.kb import KnowledgeBase
    from medverify.retrieve import Retriever

    queries = load_queries(args.queries)
    out: dict[str, Any] = {"queries": len(queries), "load_before": os.getloadavg()}
    out["lexical_settings"] = {"lexical_bounded_from": args.lexical_bounded_from,
                               "lexical_postings_from": args.lexical_postings_from}
    settings = KBSettings(nprobe=args.nprobe, lexical_bounded_from=args.lexical_bounded_from,
                          lexical_postings_from=args.lexical_postings_from)
    if args.lexical_postings_from is not None:  # the stored postings, built when not fresh
        with KnowledgeBase.open(args.kb, settings=settings) as kb:
            if (kb.stats().chunks >= args.lexical_postings_from
                    and kb.lexical_postings_state() != "fresh"):
                started = time.perf_counter()
                out["lexical_postings_build"] = kb.build_lexical_postings()
                out["lexical_postings_build"]["seconds"] = round(
                    time.perf_counter() - started, 1)
            out["lexical_postings"] = kb.lexical_postings_state()
    started = time.perf_counter()
    kb = KnowledgeBase.open(args.kb, settings=settings)
    kb._embedder = CachedEmbedder(kb.embedder, queries)
    vectors = np.stack([kb._embedder.vectors[q] for q in queries])
    index = kb.vector_index.ensure()
    out["open_ms"] = round(1000 * (time.perf_counter() - started), 1)
    out["index"] = kb.stats().index_kind
    out["mapped"] = kb.vector_index.mapped
    out["memory_after_open_mb"] = _memory()
    out["query_embed_ms_hash"] = round(kb._embedder.embed_ms, 3)
    flat = faiss.read_index(str(Path(args.work) / f"flat_{args.n}.faiss"),
                            faiss.IO_FLAG_MMAP_IFC)
    truth, _ = exact_truth(flat, vectors)  # the first pass warms the page cache
    out["dense_exact"] = pct(exact_truth(flat, vectors)[1])
    out["dense_approx"] = sweep(index, vectors, truth, "ivf", args.sweep)
    kb.vector_index.set_knobs(nprobe=args.nprobe)
    retriever = Retriever(kb)
    modes: dict[str, list[float]] = {"lexical_rank": [], "hybrid_rank": [], "dense_rank": [],
                                     "hybrid_search": [], "lexical_candidates_50": []}
    for _ in range(2):  # the first pass warms the page cache; the second is reported
        for key in modes:
            modes[key] = []
        for q in queries:
            modes["lexical_candidates_50"].append(
                _timed(lambda q=q: kb.lexical_candidates(q, 50))[0])
            modes["lexical_rank"].append(_timed(lambda q=q: retriever.rank_many([q], 7,
                                                                                "lexical"))[0])
            modes["dense_rank"].append(_timed(lambda q=q: retriever.rank_many([q], 7,
                                                                              "dense"))[0])
            modes["hybrid_rank"].append(_timed(lambda q=q: retriever.rank_many([q], 7,
                                                                               "hybrid"))[0])
            modes["hybrid_search"].append(_timed(lambda q=q: retriever.search_many([q], 7,
                                                                                   "hybrid"))[0])
    out["modes"] = {key: pct(values) for key, values in modes.items()}
    slow = sorted(zip(modes["lexical_candidates_50"], queries, strict=True), reverse=True)[:5]
    out["slowest_lexical"] = [{"ms": round(ms, 1), "query": q[:120]} for ms, q in slow]
    # hybrid on the exact index, for the before/after comparison
    kb.vector_index.loaded, kb.vector_index.mapped = flat, True
    out["hybrid_rank_exact_index"] = pct([_timed(lambda q=q: retriever.rank_many(
        [q], 7, "hybrid"))[0] for q in queries])
    out["memory_end_mb"] = _memory()
    out["peak_rss_mb"] = peak_mb()
    out["load_after"] = os.getloadavg()
    kb.close()
    return out


def stage_ingest_slice(args: argparse.Namespace) -> dict[str, Any]:
    """The real ingest path's rate on the first ``--slice`` passages of the corpus."""
    from itertools import islice

    from medverify.config import KBSettings
    from medverify.kb import KnowledgeBase
    from medverify.kb.loaders import iter_sources

    kb_dir = Path(args.work) / "kb_slice"
    started = time.perf_counter()
    with KnowledgeBase.create(kb_dir, KBSettings(embedder=EMBEDDER)) as kb:
        stats = kb.ingest(islice(iter_sources([Path(args.corpus)]), args.slice))
        index = kb.stats().index_kind
    seconds = time.perf_counter() - started
    return {"passages": args.slice, "seconds": round(seconds, 1),
            "passages_per_s": round(args.slice / seconds, 1), "index": index,
            "chunks": stats.chunks_added, "peak_rss_mb": peak_mb()}


def stage_pool(args: argparse.Namespace) -> dict[str, Any]:
    """Embed the seeded ``--pool`` sentences with all-MiniLM-L6-v2 (once; ~15-35
    sentences/s on these cores) into ``minilm_pool{N}.npy`` for the ``minilm`` stage."""
    from make_large_corpus import load_pool

    from medverify.kb.embed import get_embedder

    pool = load_pool().restricted(args.pool, seed=0)
    embedder = get_embedder("all-MiniLM-L6-v2")
    started = time.perf_counter()
    vectors = np.concatenate([embedder.embed(pool.sentences[i:i + 256])
                              for i in range(0, len(pool.sentences), 256)])
    np.save(Path(args.work) / f"minilm_pool{args.pool}.npy", vectors.astype(np.float32))
    return {"sentences": len(pool.sentences), "seconds": round(time.perf_counter() - started, 1)}


def stage_minilm(args: argparse.Namespace) -> dict[str, Any]:
    """Index-level recall and latency over real MiniLM geometry (see the module doc)."""
    import faiss
    from make_large_corpus import load_pool, passage_plans

    from medverify.kb.embed import get_embedder
    from medverify.kb.embed_base import normalize
    from medverify.kb.index import choose_spec

    pool = load_pool().restricted(args.pool, seed=0)
    sentence_vectors = np.load(Path(args.work) / f"minilm_pool{args.pool}.npy")
    assert len(sentence_vectors) == len(pool.sentences)
    queries = load_queries(args.queries)
    embedder = get_embedder("all-MiniLM-L6-v2")
    qv = np.asarray(embedder.embed(queries), dtype=np.float32)
    out: dict[str, Any] = {"pool_sentences": len(pool.sentences), "queries": len(queries)}
    sizes = {"sentences": sentence_vectors}
    started = time.perf_counter()
    plans = list(passage_plans(pool, args.n, args.seed))
    flat_ids = np.fromiter((s for _, c in plans for s in c), dtype=np.int64)
    offsets = np.cumsum([0] + [len(c) for _, c in plans[:-1]])
    sizes["passages"] = normalize(np.add.reduceat(sentence_vectors[flat_ids], offsets, axis=0))
    del plans, flat_ids
    out["passage_vectors_s"] = round(time.perf_counter() - started, 1)
    for name, base in sizes.items():
        ids = np.arange(len(base), dtype=np.int64)
        flat = faiss.IndexIDMap2(faiss.IndexFlatIP(base.shape[1]))
        flat.add_with_ids(base, ids)
        truth, exact_ms = exact_truth(flat, qv)
        row: dict[str, Any] = {"vectors": len(base), "dense_exact": pct(exact_ms)}
        for kind in args.minilm_kinds:
            if kind != "ivf" and len(base) > args.hnsw_max:  # (build time on 2 cores)
                continue
            spec = choose_spec(kind, len(base), base.shape[1])
            started = time.perf_counter()
            if kind == "hnsw":
                index = faiss.IndexIDMap2(faiss.IndexHNSWFlat(base.shape[1], spec.hnsw_m,
                                                              faiss.METRIC_INNER_PRODUCT))
            else:
                cls = faiss.IndexIVFFlat if kind == "ivf" else faiss.IndexIVFPQ
                extra = () if kind == "ivf" else (spec.pq_m, 8)
                index = cls(faiss.IndexFlatIP(base.shape[1]), base.shape[1], spec.nlist,
                            *extra, faiss.METRIC_INNER_PRODUCT)
                step = max(1, len(base) // max(40 * spec.nlist, 9984))
                index.cp.niter = 10
                index.train(np.ascontiguousarray(base[::step]))
            index.add_with_ids(base, ids)
            build = round(time.perf_counter() - started, 1)
            values = args.ef if kind == "hnsw" else args.sweep
            row[kind] = {"spec": spec.describe(), "build_s": build,
                         "sweep": sweep(index, qv, truth, kind, values)}
            del index
        out[name] = row
        del flat
    out["peak_rss_mb"] = peak_mb()
    return out


# ---- driver --------------------------------------------------------------------------------


def run_stage(name: str, args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--stage", name, "--n", str(args.n),
            "--seed", str(args.seed), "--work", str(args.work), "--queries", str(args.queries),
            "--nprobe", str(args.nprobe), "--pool", str(args.pool), "--slice", str(args.slice),
            "--lexical-bounded-from", str(args.lexical_bounded_from),
            "--lexical-postings-from", str(args.lexical_postings_from)]
    for key, value in extra.items():
        argv += [f"--{key}", str(value)]
    log(f"stage {name} ...")
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"stage {name} failed ({done.returncode})")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = round(time.perf_counter() - started, 1)
    log(f"stage {name}: {result['wall_s']} s")
    return result


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def optional_int(text: str) -> int | None:
    return None if text.lower() in ("none", "off", "") else int(text)


def search_only(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """The search stage alone on the KB already built in ``--work``, merged into the results
    file: the earlier search is kept as ``search_previous``."""
    kb = args.work / f"kb_{args.n}"
    if not kb.is_dir() or not (args.work / f"flat_{args.n}.faiss").is_file():
        raise SystemExit(f"no KB (or flat index) in {args.work}: run the full benchmark first")
    name = "kb_scale" if args.n == 1_000_000 else f"kb_scale_{args.n}"
    result = json.loads((RESULTS / f"{name}.json").read_text())
    command = " ".join([".venv/bin/python benchmarks/bench_kb_scale.py",
                        *(argv if argv is not None else sys.argv[1:])])
    if args.search_as:  # an extra search beside the main one (e.g. the bm25() fallback)
        extra = run_stage("search", args, kb=kb)
        extra["command"] = command
        extra["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        result[f"search_{args.search_as}"] = extra
    else:
        if "search_previous" not in result:
            result["search_previous"] = {**result["search"], "command": result["command"]}
        result["search"] = run_stage("search", args, kb=kb)
        result["search"]["command"] = command
        result["search_only"] = {"command": command,
                                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown(result))
    log(f"wrote {RESULTS / name}.json and .md")
    return 0


def machine(load_before: str) -> dict[str, Any]:
    import faiss

    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "faiss": faiss.__version__, "load_before": load_before,
            "load_after": Path("/proc/loadavg").read_text().split()[0]}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/kbscale"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--nprobe", type=int, default=32)
    parser.add_argument("--lexical-bounded-from", type=optional_int, default=None,
                        help="[kb_settings] lexical_bounded_from for the search stage (the "
                        "opt-in bounded lexical ranking; the first 1M runs used 100000); "
                        "default none, as the configuration")
    parser.add_argument("--lexical-postings-from", type=optional_int, default=100_000,
                        help="[kb_settings] lexical_postings_from for the search stage (the "
                        "default; the stored postings are built first when not fresh); none: "
                        "bm25()")
    parser.add_argument("--search-only", action="store_true",
                        help="run the search stage alone on the existing KB (WORK/kb_N, "
                        "WORK/flat_N.faiss) and merge it into benchmarks/results/kb_scale"
                        ".json, keeping the other stages and the earlier search")
    parser.add_argument("--as", dest="search_as", metavar="NAME",
                        help="with --search-only: keep the main search and store this one as "
                        "search_NAME (e.g. --lexical-postings-from none --as bm25_fallback)")
    parser.add_argument("--pool", type=int, default=12_000,
                        help="sentences embedded with MiniLM for the index-level part")
    parser.add_argument("--slice", type=int, default=20_000,
                        help="passages ingested through the real ingest path")
    parser.add_argument("--skip", nargs="*", default=[],
                        help="stages to skip when the partial result already has them")
    parser.add_argument("--merge", type=Path, action="append", default=[], metavar="STAGE=JSON",
                        help="take a stage's result from a JSON file (a stage run alone)")
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--kb", help=argparse.SUPPRESS)
    parser.add_argument("--index", default="",
                        help="index kind for the reindex stage (default: the KB's choice)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.sweep = [4, 8, 16, 32, 64, 128]
    args.ef = [32, 64, 128, 256]
    args.minilm_kinds = ["ivf", "ivfpq", "hnsw"]
    args.hnsw_max = 100_000
    stages: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
        "corpus": stage_corpus, "ingest": stage_ingest, "build": stage_build,
        "reindex": stage_reindex, "search": stage_search, "ingest_slice": stage_ingest_slice,
        "pool": stage_pool, "minilm": stage_minilm}
    if args.stage:
        print(json.dumps(stages[args.stage](args)))
        return 0
    if args.search_only:
        return search_only(args, argv)
    args.work.mkdir(parents=True, exist_ok=True)
    kb = args.work / f"kb_{args.n}"
    corpus = args.work / f"corpus_{args.n}.jsonl"
    load_before = Path("/proc/loadavg").read_text().split()[0]
    partial = args.work / f"kb_scale_{args.n}.json"
    result: dict[str, Any] = json.loads(partial.read_text()) if partial.is_file() else {}
    for item in args.merge:
        stage, _, path = str(item).partition("=")
        result[stage] = json.loads(Path(path).read_text())
    result.update({"n": args.n, "nprobe": args.nprobe, "command": " ".join(
        [".venv/bin/python benchmarks/bench_kb_scale.py", *(argv or sys.argv[1:])])})

    def step(name: str, **extra: Any) -> None:
        if name in args.skip and name in result:
            return
        result[name] = run_stage(name, args, **extra)
        partial.write_text(json.dumps(result, indent=1))

    if not kb.is_dir() or "build" not in args.skip or "build" not in result:
        import shutil

        shutil.rmtree(kb, ignore_errors=True)
        step("build", kb=kb)
        step("reindex", kb=kb, **({"index": args.index} if args.index else {}))
    step("search", kb=kb)
    if not corpus.is_file() and "ingest_slice" not in args.skip:
        step("corpus", corpus=corpus)
    if "ingest_slice" not in args.skip:
        import shutil

        shutil.rmtree(args.work / "kb_slice", ignore_errors=True)
        step("ingest_slice", corpus=corpus)
    if not (args.work / f"minilm_pool{args.pool}.npy").is_file():
        step("pool")
    step("minilm")
    result["machine"] = machine(load_before)
    result["notes"] = NOTES
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "kb_scale" if args.n == 1_000_000 else f"kb_scale_{args.n}"
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown(result))
    log(f"wrote {RESULTS / name}.json and .md")
    return 0


NOTES = [
    "Vectors of the 1M KB are hash-384 (feature hashing of words and bigrams), written by "
    "the bench's bulk writer, not the ingest path: MiniLM embeds ~15-40 passages/s on these "
    "2 shared cores (1M passages: 7-18 h). hash-384 vectors are an honest cheap vector "
    "source of the right dimension whose neighbourhoods follow word overlap; the MiniLM "
    "table gives recall on real embedding geometry.",
    "Recall@10 is the share of the exact (flat) top 10 that the approximate index returns "
    "in its top 10, per query, averaged.",
    "Memory: the IVF file is memory-mapped, so its pages count as RssFile (page cache, "
    "shared, evictable) rather than RssAnon; the exact index for the comparison is mapped "
    "too. The RSS after reopen includes `kb.stats()`, whose snapshot id reads every "
    "document row once.",
    "The machine was shared: other agents' jobs kept the load average at 11-15 on 2 CPUs "
    "during the build, the reindex, the minilm stage and a first search run, and 6-7 during "
    "a second; the search reported above is a third run on a quiet machine (load 1.4-2.3). "
    "Build times are therefore inflated; the earlier search runs are listed below.",
    "recall@10 >= 0.95 of exact: met on MiniLM geometry at nprobe 32 (0.972 at 1M, 0.98 on "
    "real sentence embeddings), the default; not on hash-384 vectors (0.805 at nprobe 32, "
    "0.92 at 128): feature-hash vectors are nearly orthogonal bags of words with no cluster "
    "structure, the worst case for IVF. IVF-PQ (PQ48, 8x smaller) tops out at 0.77 without "
    "re-ranking: offered, not chosen by auto.",
]


if __name__ == "__main__":
    raise SystemExit(main())
