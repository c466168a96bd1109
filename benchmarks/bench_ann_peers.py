"""Dense ANN search against the peers on one vector set (issue 45, "HNSW where it wins").

On the SAME base vectors and the SAME query vectors, in one run per KB size:

- faiss ``IndexFlatIP`` (exact: the ground truth, and its latency),
- faiss IVF-flat as medverify builds it (``choose_spec("ivf", n)``: nlist about 4 sqrt N, a
  power of two; k-means on 40 vectors a list, 10 iterations), ``nprobe`` swept,
- faiss HNSW as medverify builds it (``IndexIDMap2(IndexHNSWFlat)``) for each graph of
  ``--faiss-hnsw`` (``M16C100``: M 16, efConstruction 100), ``efSearch`` swept,
- hnswlib (``ip`` space) for each graph of ``--hnswlib``, ``ef`` swept,
- ``medverify`` (``--systems medverify``): the index medverify's own code builds for a KB of
  that size under ``auto`` (``VectorIndex.rebuild`` over a KB SQLite holding the vectors:
  hnswlib when installed, faiss otherwise), read back and searched through
  ``VectorIndex.search`` (its wrapper's overhead included): ``auto`` with the default
  ``ef_search`` (the ef rule), then each ``--efs`` value as ``ef_search`` (the rule's floor
  applies: values below it search at the rule's ef),
- chromadb (an on-disk ``PersistentClient`` collection with its default HNSW settings,
  ``space = "ip"``), one collection per ``--chroma-efs`` ef_search (chromadb reads it when
  it loads the index; ``collection.modify`` does not reach an index already loaded), only up
  to ``--chroma-max`` vectors (its build at 1M takes longer than this machine has),

each: build time (on ``--build-threads`` threads), memory (the peak resident-set growth of
the process that built it over the base vectors it had loaded, and the index's bytes on
disk), single-query latency p50 / p95 on ONE
thread (faiss ``omp_set_num_threads(1)`` through medverify's own ``faiss_search``, hnswlib
``set_num_threads(1)``, chromadb one query a call) and recall@10 against the exact top 10.
Each index is built in its own child process (its memory growth is its own); then one
process loads every index of the size (faiss files memory-mapped as medverify reads them)
and times them interleaved: the queries go in blocks of ``--block``, and every block runs
through every configuration in an order rotated block by block, after one untimed warm
pass. At equal recall: for each system the fastest setting whose recall@10 is at least
``--recall`` (0.95), and its ratio to hnswlib's.

The CPU caches. This machine's L3 (260 MB) holds a whole 100k index (170 MB): a
configuration that follows another setting of the SAME graph on the same block of queries
finds their nodes in cache (runs before 2026-12-07 timed ``hnswlib ef 96`` and ``ef 128``
after ``ef 64`` on their graph, but medverify's default after another graph: hnswlib ef 64
came out slower than ef 96, medverify at ef 192 as fast as at ef 128, and medverify 1.62x
hnswlib at the same ef). So each configuration now starts each block from caches cleared
by a write over ``--flush-mb`` (default twice the L3 size; 0: no flush, the old order
effect), whatever ran before it. ``--rounds`` times the blocks that many times (p50 over
all: at load 5-8 one pass's ratios moved by +-10 %).

The vectors. MiniLM embeds tens of passages a second on these 2 shared cores, so the base
vectors follow the model of ``bench_search_e2e.py``: ``make_large_corpus.py``'s synthetic
passages (real sentences of MedQuAD, Check-COVID and Citation-Integrity reshuffled, 3-6 a
passage, seeded), each vector ``normalise(n_title e(title) + sum n_s e(s))`` with ``e`` the
real all-MiniLM-L6-v2 vector of the pool's sentences and titles (``--pool`` sentences of
whole documents, embedded once by ``bench_search_e2e.py --stage pool``) and ``n`` the token
count. The N-vector set is the first N passages of the seeded generator (the 100k set is
the 1M set's prefix). The queries are 200 real claims (Check-COVID and Citation-Integrity
dev) embedded with real MiniLM (ONNX Runtime fp32).

    mkdir -p /tmp/annpeers && .venv/bin/python benchmarks/bench_search_e2e.py \
        --pool 8000 --work /tmp/annpeers --stage pool   # once: the pool's MiniLM vectors
    .venv/bin/python benchmarks/bench_ann_peers.py --n 100000 [--work /tmp/annpeers]
    .venv/bin/python benchmarks/bench_ann_peers.py --n 1000000 --systems faiss-hnsw hnswlib \
        ivf --faiss-hnsw M16C100 --hnswlib M16C100 --build-threads 1
    # medverify's own index (hnswlib when installed) beside the peers' builds of one size:
    .venv/bin/python benchmarks/bench_ann_peers.py --n 100000 --systems medverify \
        --build-threads 1 --stages build
    .venv/bin/python benchmarks/bench_ann_peers.py --n 100000 --systems ivf faiss-hnsw \
        hnswlib medverify --faiss-hnsw M16C100 --hnswlib M16C100 --efs 64 96 128 192 256 \
        --nprobes 16 32 --stages search
    .venv/bin/python benchmarks/bench_ann_peers.py --report   # the md again from the json

Writes benchmarks/results/ann_peers.json and .md (one entry per size; a run of one size
keeps the other sizes' entries).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULTS = ROOT / "benchmarks" / "results"
EMBEDDER = "all-MiniLM-L6-v2"
K = 10
SYSTEMS = ("ivf", "faiss-hnsw", "hnswlib", "chromadb", "medverify")
MEDVERIFY = "medverify-auto"  # the build configuration of the medverify system

from bench_kb_scale import load_queries, peak_mb, rss_mb  # noqa: E402


def load() -> float:
    return round(os.getloadavg()[0], 2)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def pct(values: Sequence[float]) -> dict[str, float]:
    ordered = np.asarray(values, dtype=np.float64)
    return {"p50": round(float(np.percentile(ordered, 50)), 3),
            "p95": round(float(np.percentile(ordered, 95)), 3),
            "mean": round(float(ordered.mean()), 3)}


def anon_mb() -> float:
    """This process's anonymous resident memory (not the page cache a mapped file uses)."""
    with open("/proc/self/status", encoding="ascii") as handle:
        found = next((line for line in handle if line.startswith("RssAnon:")), "0 0")
    return int(found.split()[1]) / 1024


def tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# ---- the vectors ------------------------------------------------------------------------------


def stage_vectors(args: argparse.Namespace) -> dict[str, Any]:
    """The base vectors (``base_N.npy``), the query vectors and the exact top 10."""
    import faiss
    from bench_search_e2e import VectorModel
    from make_large_corpus import load_pool, passage_plans

    work = Path(args.work)
    started = time.perf_counter()
    pool = load_pool()
    pool = pool.restricted(args.pool, seed=0) if args.pool else pool
    files = [work / f"{name}_{args.n}.{ext}"
             for name, ext in (("base", "npy"), ("flat", "faiss"), ("truth", "npy"))]
    queries = query_vectors(work, args.queries)
    faiss.omp_set_num_threads(args.build_threads)
    if all(f.is_file() for f in files):  # written by an earlier run with these arguments
        flat = faiss.read_index(str(files[1]), faiss.IO_FLAG_MMAP_IFC)
        scores, truth = flat.search(queries, K)
        if not np.array_equal(truth, np.load(files[2])) or flat.ntotal != args.n:
            raise SystemExit(f"{work} holds other vectors: delete its *_{args.n}.* files")
        return {"n": args.n, "pool_sentences": len(pool.sentences), "reused": True,
                "queries": len(queries), "tenth_score_mean": round(float(scores[:, -1].mean()), 4)}
    model = VectorModel(work, args.pool, "tokens")
    base = np.lib.format.open_memmap(files[0], mode="w+", dtype=np.float32,
                                     shape=(args.n, 384))
    plans = passage_plans(pool, args.n, args.seed)
    for start in range(0, args.n, 20_000):
        block = [next(plans) for _ in range(min(20_000, args.n - start))]
        base[start:start + len(block)] = model.vectors(block)
    base.flush()
    vectors_s = time.perf_counter() - started
    flat = faiss.IndexFlatIP(base.shape[1])
    flat.add(np.ascontiguousarray(base))
    scores, truth = flat.search(queries, K)
    faiss.write_index(flat, str(files[1]))
    np.save(files[2], truth)
    return {"n": args.n, "pool_sentences": len(pool.sentences), "vectors_s": round(vectors_s, 1),
            "queries": len(queries), "tenth_score_mean": round(float(scores[:, -1].mean()), 4),
            "gap_10_11_note": "ties in the exact top 10 are not expected on float vectors"}


def query_vectors(work: Path, count: int) -> np.ndarray:
    """The real claims embedded with MiniLM (cached in ``work``)."""
    path = work / f"queries_{count}.npy"
    if not path.is_file():
        from medverify.kb.embed import get_embedder

        embedder = get_embedder(EMBEDDER, "fp32", "cpu", "onnx")
        np.save(path, np.asarray(embedder.embed(load_queries(count)), dtype=np.float32))
    return np.load(path)


# ---- the builds (one child process each) --------------------------------------------------------


def configs(args: argparse.Namespace) -> list[str]:
    """The index configurations to build at this size."""
    out: list[str] = []
    for system in args.systems:
        if system == "faiss-hnsw":
            out += [f"faiss-hnsw-{graph}" for graph in args.faiss_hnsw]
        elif system == "hnswlib":
            out += [f"hnswlib-{graph}" for graph in args.hnswlib]
        elif system == "chromadb":
            out += [f"chromadb-E{e}" for e in args.chroma_efs if args.n <= args.chroma_max]
        elif system == "medverify":
            out.append(MEDVERIFY)
        else:
            out.append(system)
    return out


def family(config: str) -> str:
    """The system of a build configuration (``faiss-hnsw-M32C40``: ``faiss-hnsw``)."""
    head, _, tail = config.rpartition("-")
    return head if re.fullmatch(r"M\d+C\d+|E\d+", tail) else config


def graph(config: str) -> tuple[int, int]:
    """(M, efConstruction) of an HNSW build configuration (``...-M16C100``)."""
    found = re.search(r"-M(\d+)C(\d+)$", config)
    if found is None:
        raise ValueError(f"not an HNSW configuration: {config}")
    return int(found[1]), int(found[2])


def index_path(work: Path, n: int, config: str) -> Path:
    return work / f"index_{n}_{config}"


def stage_build(args: argparse.Namespace) -> dict[str, Any]:
    """Build ``args.config`` over the base vectors; build time, memory growth, bytes."""
    import faiss

    faiss.omp_set_num_threads(args.build_threads)
    work, config = Path(args.work), args.config
    base = np.ascontiguousarray(np.load(work / f"base_{args.n}.npy"))
    gc.collect()
    before = rss_mb()
    started = time.perf_counter()
    path = index_path(work, args.n, config)
    shutil.rmtree(path, ignore_errors=True)
    path.unlink(missing_ok=True)
    detail = BUILDERS[family(config)](base, path, config, args)
    seconds = time.perf_counter() - started
    gc.collect()
    index_bytes = detail.pop("index_bytes", None) or tree_bytes(path)
    seconds -= detail.pop("untimed_s", 0.0)
    return {"config": config, "build_s": round(seconds, 1),
            "rss_growth_mb": round(peak_mb() - before, 1), "peak_rss_mb": peak_mb(),
            "base_mb": round(base.nbytes / 2**20, 1), "index_bytes": index_bytes,
            "build_threads": args.build_threads, "load_after": load(), **detail}


def build_ivf(base: np.ndarray, path: Path, config: str, args: argparse.Namespace) -> dict:
    """IVF-flat with medverify's parameters and training (kb/index.py)."""
    import faiss

    from medverify.kb.index import TRAIN_PER_LIST, choose_spec, make_index

    spec = choose_spec("ivf", len(base), base.shape[1])
    index = make_index(spec, base.shape[1])
    ivf = faiss.extract_index_ivf(index)
    ivf.cp.niter = 10
    ivf.cp.max_points_per_centroid = max(ivf.cp.max_points_per_centroid, TRAIN_PER_LIST)
    step = max(1, len(base) // (TRAIN_PER_LIST * spec.nlist))
    index.train(np.ascontiguousarray(base[::step]))
    add_blocks(index, base)
    faiss.write_index(index, str(path))
    return {"spec": spec.describe()}


def build_faiss_hnsw(base: np.ndarray, path: Path, config: str,
                     args: argparse.Namespace) -> dict:
    """``IndexIDMap2(IndexHNSWFlat)`` as medverify builds it, at M from the config."""
    import faiss

    from medverify.kb.index import IndexSpec, make_index

    m, efc = graph(config)
    spec = IndexSpec("hnsw", hnsw_m=m, hnsw_efc=efc)
    index = make_index(spec, base.shape[1])
    add_blocks(index, base)
    faiss.write_index(index, str(path))
    inner = faiss.downcast_index(index.index)
    return {"spec": spec.describe(), "ef_construction": inner.hnsw.efConstruction}


def add_blocks(index: Any, base: np.ndarray) -> None:
    for start in range(0, len(base), 100_000):
        block = base[start:start + 100_000]
        index.add_with_ids(block, np.arange(start, start + len(block), dtype=np.int64))


def build_hnswlib(base: np.ndarray, path: Path, config: str, args: argparse.Namespace) -> dict:
    import hnswlib

    m, efc = graph(config)
    index = hnswlib.Index(space="ip", dim=base.shape[1])
    index.init_index(max_elements=len(base), ef_construction=efc, M=m)
    index.set_num_threads(args.build_threads)
    index.add_items(base, np.arange(len(base)))
    index.save_index(str(path))
    return {"M": m, "ef_construction": efc,
            "version": getattr(hnswlib, "__version__", "0.8.0")}


def build_chromadb(base: np.ndarray, path: Path, config: str, args: argparse.Namespace) -> dict:
    """A persistent collection, chromadb's default HNSW settings but the ``ip`` space and
    the config's ``ef_search`` (set at creation: ``collection.modify`` does not reach an
    index already loaded in the process, measured)."""
    import chromadb

    client = chromadb.PersistentClient(path=str(path))
    collection = client.create_collection("bench", configuration={"hnsw": {
        "space": "ip", "num_threads": args.build_threads,
        "ef_search": int(config.rpartition("-E")[2])}})
    batch = client.get_max_batch_size()
    for start in range(0, len(base), batch):
        block = base[start:start + batch]
        collection.add(ids=[str(i) for i in range(start, start + len(block))],
                       embeddings=block)
    hnsw = collection.configuration.get("hnsw") or {}
    return {"version": chromadb.__version__, "hnsw": dict(hnsw), "batch": batch}


def kb_connection(path: Path, base: np.ndarray | None = None) -> Any:
    """A KB SQLite of the vectors (what ``VectorIndex`` reads: ``meta``'s generation, the
    ``documents`` and ``chunks`` tables), chunk ids 0..n-1 as the exact index's positions;
    written first when ``base`` is given."""
    import sqlite3

    from medverify.kb.database import DB_NAME

    if base is not None:
        path.mkdir(parents=True)
        conn = sqlite3.connect(path / DB_NAME)
        conn.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;"
                           "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                           "INSERT INTO meta VALUES ('generation', '1');"
                           "CREATE TABLE documents (id INTEGER PRIMARY KEY);"
                           "CREATE TABLE chunks (id INTEGER PRIMARY KEY, vector BLOB NOT NULL);")
        for start in range(0, len(base), 50_000):
            block = base[start:start + 50_000]
            conn.executemany("INSERT INTO chunks VALUES (?, ?)",
                             ((start + i, row.tobytes()) for i, row in enumerate(block)))
        conn.commit()
        return conn
    return sqlite3.connect(f"file:{path / DB_NAME}?mode=ro", uri=True)


def medverify_index(path: Path, conn: Any) -> Any:
    from medverify.kb.index import VectorIndex

    return VectorIndex(path, 384, conn, policy="auto", embedder_id=EMBEDDER)


def build_medverify(base: np.ndarray, path: Path, config: str,
                    args: argparse.Namespace) -> dict:
    """The index medverify builds for a KB of this size under ``auto`` (VectorIndex.rebuild:
    read from the KB's SQLite, built, saved as vectors.faiss + vectors.json); the time to
    write the SQLite first is not counted."""
    from medverify.kb.index import INDEX_NAME

    started = time.perf_counter()
    conn = kb_connection(path, base)
    fill_s = time.perf_counter() - started
    index = medverify_index(path, conn)
    index.rebuild()
    spec = index.current_spec()
    return {"spec": f"medverify auto: {spec.describe()}", "kind": spec.kind,
            "index_bytes": (path / INDEX_NAME).stat().st_size, "untimed_s": fill_s,
            "sqlite_fill_s": round(fill_s, 1)}


BUILDERS: dict[str, Callable[..., dict]] = {
    "ivf": build_ivf, "faiss-hnsw": build_faiss_hnsw, "hnswlib": build_hnswlib,
    "chromadb": build_chromadb, MEDVERIFY: build_medverify}


# ---- the search (one process, every index of the size, interleaved) -----------------------------


class Config:
    """One (index, query-time setting): ``prepare`` sets it, ``search`` finds the top 10."""

    def __init__(self, system: str, build: str, setting: str, prepare: Callable[[], None],
                 search: Callable[[np.ndarray], Sequence[int]]) -> None:
        self.system, self.build, self.setting = system, build, setting
        self.prepare, self.search = prepare, search  # search: the top 10 ids
        self.name = f"{build} {setting}".strip()


def faiss_configs(work: Path, n: int, build: str, args: argparse.Namespace) -> list[Config]:
    """medverify's faiss indexes, read as medverify reads them (memory-mapped)."""
    import faiss

    from medverify.kb.index import faiss_search, set_query_knob

    path = str(work / f"flat_{n}.faiss") if build == "flat" else str(index_path(work, n, build))
    flags = faiss.IO_FLAG_MMAP if build == "ivf" else faiss.IO_FLAG_MMAP_IFC
    index = faiss.read_index(path, flags)

    def search(query: np.ndarray) -> np.ndarray:
        return faiss_search(index, query[None, :], K)[1][0]

    if build == "flat":
        return [Config("faiss-flat", "flat", "", lambda: None, search)]
    if build == "ivf":
        return [Config("faiss-ivf", build, f"nprobe {p}",
                       lambda p=p: set_query_knob(index, nprobe=p), search)
                for p in args.nprobes]
    return [Config("faiss-hnsw", build, f"ef {e}",
                   lambda e=e: set_query_knob(index, ef_search=e), search) for e in args.efs]


def hnswlib_configs(work: Path, n: int, build: str, args: argparse.Namespace) -> list[Config]:
    import hnswlib

    index = hnswlib.Index(space="ip", dim=384)
    index.load_index(str(index_path(work, n, build)), max_elements=n)
    index.set_num_threads(1)

    def search(query: np.ndarray) -> np.ndarray:
        return index.knn_query(query, k=K)[0][0]

    return [Config("hnswlib", build, f"ef {e}", lambda e=e: index.set_ef(e), search)
            for e in args.efs]


def chromadb_configs(work: Path, n: int, build: str, args: argparse.Namespace) -> list[Config]:
    import chromadb

    collection = chromadb.PersistentClient(path=str(index_path(work, n, build))
                                           ).get_collection("bench")

    def search(query: np.ndarray) -> np.ndarray:
        found = collection.query(query_embeddings=query[None, :], n_results=K,
                                 include=["distances"])
        return np.array([int(i) for i in found["ids"][0]], dtype=np.int64)

    ef = (collection.configuration.get("hnsw") or {}).get("ef_search")
    return [Config("chromadb", build, f"ef {ef}", lambda: None, search)]


def medverify_configs(work: Path, n: int, build: str, args: argparse.Namespace) -> list[Config]:
    """The index medverify built, opened and searched as a KB does (VectorIndex.ensure:
    trusted when vectors.json matches, memory-mapped if its backend maps; .search)."""
    path = index_path(work, n, build)
    index = medverify_index(path, kb_connection(path))
    if index.state() != "fresh":
        raise SystemExit(f"{path}: the saved index is {index.state()}: build it again")
    index.ensure()

    def search(query: np.ndarray) -> list[int]:  # the ids as VectorIndex gives them
        return [i for i, _ in index.search(query[None, :], K)[0]]

    def ef_of(ef_search: int) -> str:
        index.set_knobs(ef_search=ef_search)
        ef = getattr(index.loaded, "ef", None)  # hnswlib's wrapper; faiss's HNSW below
        inner = getattr(index.loaded, "index", None)
        ef = ef if ef is not None else getattr(getattr(inner, "hnsw", None), "efSearch", "-")
        return f"ef {ef}"

    kind = index.current_spec().kind
    out = [Config("medverify", build, f"auto {kind} ({ef_of(128)})",
                  lambda: index.set_knobs(ef_search=128), search)]
    return out + [Config("medverify", build, f"ef_search {e} ({ef_of(e)})",
                         lambda e=e: index.set_knobs(ef_search=e), search)
                  for e in args.efs if ef_of(e) != ef_of(128)]


def l3_mb() -> int:
    """The L3 cache's size in MiB (sysfs; 256 when it cannot be read)."""
    size = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")
    try:
        text = size.read_text().strip()
    except OSError:
        return 256
    scale = {"K": 1 / 1024, "M": 1, "G": 1024}.get(text[-1:], 1 / 2**20)
    return max(1, round(float(text.rstrip("KMG")) * scale))


def cache_flusher(mb: int) -> Callable[[], None]:
    """A call that writes over ``mb`` MiB (0: does nothing), evicting every index from the
    CPU caches, so the configuration timed next starts from the same state as any other."""
    if mb <= 0:
        return lambda: None
    buffer = np.zeros(mb * 2**20 // 8, dtype=np.int64)

    def flush() -> None:
        np.add(buffer, 1, out=buffer)

    return flush


def stage_search(args: argparse.Namespace) -> dict[str, Any]:
    import faiss

    faiss.omp_set_num_threads(1)
    work = Path(args.work)
    queries, truth = query_vectors(work, args.queries), np.load(work / f"truth_{args.n}.npy")
    loaders = {"ivf": faiss_configs, "faiss-hnsw": faiss_configs, "hnswlib": hnswlib_configs,
               "chromadb": chromadb_configs, MEDVERIFY: medverify_configs}
    every: list[Config] = []
    anon: dict[str, float] = {}  # anonymous memory each index took to open (mapped: ~0)
    for build in ["flat", *configs(args)]:
        before = anon_mb()
        every += loaders.get(family(build), faiss_configs)(work, args.n, build, args)
        anon[build] = round(anon_mb() - before, 1)
    blocks = [range(s, min(s + args.block, len(queries)))
              for s in range(0, len(queries), args.block)]
    for config in every:  # warm: page cache, lazily loaded segments
        config.prepare()
        for i in range(len(queries)):
            config.search(queries[i])
    times: dict[str, list[float]] = {c.name: [] for c in every}
    found: dict[str, list[Any]] = {c.name: [[]] * len(queries) for c in every}
    flush = cache_flusher(args.flush_mb)
    load_before = load()
    for b, block in ((b + len(blocks) * r, block) for r in range(args.rounds)
                     for b, block in enumerate(blocks)):
        for config in every[b % len(every):] + every[:b % len(every)]:
            config.prepare()
            flush()
            for i in block:
                started = time.perf_counter()
                ids = config.search(queries[i])
                times[config.name].append(1000 * (time.perf_counter() - started))
                found[config.name][i] = ids
    rows = [{"system": c.system, "build": c.build, "setting": c.setting,
             "recall_at_10": recall(found[c.name], truth), **pct(times[c.name])}
            for c in every]
    return {"rows": rows, "queries": len(queries), "block": args.block, "open_anon_mb": anon,
            "flush_mb": args.flush_mb, "note": args.note, "rounds": args.rounds,
            "load_before": load_before, "load_after": load(), "peak_rss_mb": peak_mb()}


def recall(found: Sequence[Sequence[int]], truth: np.ndarray) -> float:
    return round(float(np.mean([len(set(map(int, f)) & set(map(int, t))) / K
                                for f, t in zip(found, truth, strict=True)])), 4)


# ---- the report ---------------------------------------------------------------------------------


def at_recall(rows: list[dict[str, Any]], target: float) -> dict[str, dict[str, Any]]:
    """Per system: the fastest (p50) setting whose recall@10 reaches ``target``."""
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["recall_at_10"] >= target and (
                row["system"] not in best or row["p50"] < best[row["system"]]["p50"]):
            best[row["system"]] = row
    return best


def markdown(result: dict[str, Any]) -> str:
    target = result["recall_target"]
    lines = ["# Dense ANN search: medverify's indexes against hnswlib and chromadb",
             "", f"`{result['command']}` ({result['date']}; {result['machine']}).", "",
             "Same base vectors (the MiniLM sentence model of bench_search_e2e.py over "
             "make_large_corpus.py's synthetic passages) and the same 200 real claims "
             "embedded with MiniLM, one process, configurations interleaved block by block; "
             "queries one at a time on ONE thread; builds on "
             f"{result['build_threads']} threads. Ratios within one size's run are what "
             "count (2 shared cores).", ""]
    for n, entry in sorted(result["sizes"].items(), key=lambda kv: int(kv[0])):
        if "search" in entry and "builds" in entry:
            lines += size_lines(int(n), entry, target)
    return "\n".join(lines) + "\n"


def default_and_same_ef(rows: list[dict[str, Any]]) -> tuple[dict | None, dict | None]:
    """medverify's row as it searches by default (``auto`` with the default ef_search: the
    ef rule) and hnswlib's row at the same ef (None when either is not in ``rows``)."""
    own = next((r for r in rows if r["system"] == "medverify"
                and r["setting"].startswith("auto")), None)
    found = re.search(r"\(ef (\d+)\)", own["setting"]) if own else None
    same = next((r for r in rows if found and r["system"] == "hnswlib"
                 and r["setting"] == f"ef {found[1]}"), None)
    return own, same


def medverify_line(rows: list[dict[str, Any]], peer: dict[str, Any] | None) -> list[str]:
    """medverify as it searches by default against hnswlib's fastest setting at the target
    and hnswlib at the same ef."""
    own, same = default_and_same_ef(rows)
    if own is None:
        return []
    text = (f"\nmedverify as it searches by default ({own['build']} {own['setting']}): "
            f"recall@10 {own['recall_at_10']}, p50 {own['p50']} ms")
    if peer:
        text += (f", {own['p50'] / peer['p50']:.2f}x hnswlib's fastest setting reaching "
                 f"the target ({peer['build']} {peer['setting']}, {peer['recall_at_10']})")
    if same:
        text += (f", {own['p50'] / same['p50']:.2f}x hnswlib at the same ef ({same['build']}: "
                 f"{same['recall_at_10']}, {same['p50']} ms)")
    return [text + "."]


def earlier_line(earlier: dict[str, Any], target: float) -> str:
    """An earlier search run in one line: each system's fastest setting at the target and
    medverify's default against hnswlib at the same ef."""
    found = at_recall(earlier["rows"], target)
    flushed = (f"caches flushed ({earlier['flush_mb']} MiB)" if earlier.get("flush_mb")
               else "no cache flush")
    note = f"; {earlier['rounds']} passes" if earlier.get("rounds", 1) > 1 else ""
    note += f"; {earlier['note']}" if earlier.get("note") else ""
    text = (f"\nAn earlier run of the search stage (load {earlier['load_before']}, {flushed}"
            f"{note}): " + "; ".join(
                f"{system} {row['build']} {row['setting']} {row['p50']} ms at "
                f"{row['recall_at_10']}" for system, row in
                sorted(found.items(), key=lambda kv: kv[1]["p50"])))
    own, same = default_and_same_ef(earlier["rows"])
    if own and same:
        text += (f"; medverify's default {own['setting']} {own['p50']} ms: "
                 f"{own['p50'] / same['p50']:.2f}x hnswlib at the same ef ({same['p50']} ms)")
    return text + "."


def size_lines(n: int, entry: dict[str, Any], target: float) -> list[str]:
    search, builds = entry["search"], entry["builds"]
    best = at_recall(search["rows"], target)
    peer = best.get("hnswlib")
    flushed = (f"; caches flushed before each configuration's block ({search['flush_mb']} "
               "MiB written)" if search.get("flush_mb") else "; no cache flush between blocks")
    flushed += f"; {search['rounds']} timed passes" if search.get("rounds", 1) > 1 else ""
    flushed += f"; {search['note']}" if search.get("note") else ""
    lines = [f"## {n:,} vectors (load {search['load_before']} -> {search['load_after']}, "
             f"{entry['date']}{flushed})", "",
             f"At equal recall (the fastest setting with recall@10 >= {target}):", "",
             "| system | setting | recall@10 | p50 ms | p95 ms | p50 / hnswlib's |",
             "|---|---|---|---|---|---|"]
    for system, row in sorted(best.items(), key=lambda kv: kv[1]["p50"]):
        ratio = f"{row['p50'] / peer['p50']:.2f}" if peer else "-"
        lines.append(f"| {system} | {row['build']} {row['setting']} | {row['recall_at_10']} "
                     f"| {row['p50']} | {row['p95']} | {ratio} |")
    lines += medverify_line(search["rows"], peer)
    missing = sorted({r["system"] for r in search["rows"]} - set(best))
    if missing:
        lines.append(f"\nNo setting reached {target}: {', '.join(missing)}.")
    for earlier in entry.get("earlier_searches", []):
        lines.append(earlier_line(earlier, target))
    opened = search.get("open_anon_mb", {})
    lines += ["", "| build | seconds | threads | peak RSS growth MB | bytes on disk | "
              "anonymous MB to open | detail |", "|---|---|---|---|---|---|---|"]
    for build in builds.values():
        detail = (build.get("spec") or build.get("hnsw")
                  or f"M {build.get('M')}, ef_construction {build.get('ef_construction')}")
        lines.append(f"| {build['config']} | {build['build_s']} | {build['build_threads']} | "
                     f"{build['rss_growth_mb']} | {build['index_bytes']:,} | "
                     f"{opened.get(build['config'], '-')} | {detail} |")
    lines += ["", "| every setting | recall@10 | p50 ms | p95 ms |", "|---|---|---|---|"]
    lines += [f"| {r['build']} {r['setting']} | {r['recall_at_10']} | {r['p50']} | {r['p95']} |"
              for r in search["rows"]]
    return [*lines, ""]


# ---- the driver ---------------------------------------------------------------------------------


def run_stage(name: str, args: argparse.Namespace, config: str = "") -> dict[str, Any]:
    command = [sys.executable, __file__, "--stage", name, "--config", config,
               *(sys.argv[1:] if not args.argv else args.argv)]
    log(f"{name} {config} (n {args.n}, load {load()})")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{name} {config} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/annpeers"))
    parser.add_argument("--pool", type=int, default=8000,
                        help="pool sentences (bench_search_e2e.py --stage pool --pool N)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--faiss-hnsw", nargs="+",
                        default=["M16C40", "M32C40", "M16C100", "M32C100", "M16C200"],
                        help="faiss HNSW graphs: M (neighbours) and C (efConstruction)")
    parser.add_argument("--hnswlib", nargs="+", default=["M16C100", "M16C200"],
                        help="hnswlib graphs: M and C (ef_construction)")
    parser.add_argument("--efs", type=int, nargs="+", default=[16, 24, 32, 48, 64, 96, 128, 192])
    parser.add_argument("--chroma-efs", type=int, nargs="+", default=[100],
                        help="a chromadb collection built for each ef_search (100: default)")
    parser.add_argument("--nprobes", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--chroma-max", type=int, default=100_000,
                        help="chromadb only up to this many vectors")
    parser.add_argument("--build-threads", type=int, default=2)
    parser.add_argument("--block", type=int, default=20, help="queries per interleaved block")
    parser.add_argument("--flush-mb", type=int, default=2 * l3_mb(),
                        help="MiB written before each configuration's block (0: none)")
    parser.add_argument("--note", default="", help="a note on the search run, in the report")
    parser.add_argument("--rounds", type=int, default=1,
                        help="timed passes over the queries (p50 and p95 over all of them)")
    parser.add_argument("--recall", type=float, default=0.95)
    parser.add_argument("--stages", nargs="+", default=["vectors", "build", "search"])
    parser.add_argument("--report", action="store_true",
                        help="only write ann_peers.md again from ann_peers.json")
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--config", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = list(argv) if argv is not None else None
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    stages: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
        "vectors": stage_vectors, "build": stage_build, "search": stage_search}
    if args.stage:
        print(json.dumps(stages[args.stage](args)))
        return 0
    if args.report:
        result = json.loads((RESULTS / "ann_peers.json").read_text())
        (RESULTS / "ann_peers.md").write_text(markdown(result))
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    partial = args.work / f"ann_peers_{args.n}.json"
    entry: dict[str, Any] = json.loads(partial.read_text()) if partial.is_file() else {}
    for name in args.stages:
        if name == "build":
            builds = entry.setdefault("builds", {})  # earlier builds of other configs kept
            for config in configs(args):
                builds[config] = run_stage("build", args, config)
                partial.write_text(json.dumps(entry, indent=1))
        else:
            if name == "search" and "search" in entry:  # a rerun: the earlier one is kept
                entry.setdefault("earlier_searches", []).append(entry["search"])
            entry[name] = run_stage(name, args)
        partial.write_text(json.dumps(entry, indent=1))
    command = " ".join(["nice -n 5 .venv/bin/python benchmarks/bench_ann_peers.py",
                        *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    entry.update({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "command": command})
    if "search" in entry:
        write_results(args, entry, command)
    return 0


def write_results(args: argparse.Namespace, entry: dict[str, Any], command: str) -> None:
    out = RESULTS / "ann_peers.json"
    result = json.loads(out.read_text()) if out.is_file() else {"sizes": {}}
    result["sizes"][str(args.n)] = entry
    result.update({"recall_target": args.recall, "build_threads": args.build_threads,
                   "command": command, "date": entry["date"],
                   "machine": f"{os.cpu_count()} CPUs, shared; load at write {load()}"})
    RESULTS.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "ann_peers.md").write_text(markdown(result))
    log(f"wrote {out} and ann_peers.md")


if __name__ == "__main__":
    raise SystemExit(main())
