"""Ingest time and search latency of a ClinicalTrials.gov trial knowledge base, at scale.

Writes a synthetic bulk-download-like zip of ``--n`` studies (``write_bulk_zip``: registry
records recombined from the real samples in ``../shared/data/raw/clinicaltrials``) to a
temporary directory, then measures, each part in a fresh child process (so every peak RSS,
``resource.getrusage(RUSAGE_SELF).ru_maxrss``, is that part's alone):

1. ``ingest``: the real ``medverify kb ingest --format ctgov`` path (``iter_ctgov`` ->
   ``KnowledgeBase.open_or_create(...).ingest``; each study becomes 15 section documents)
   of all ``--n`` studies with the ``hash-384`` embedder (deterministic feature hashing,
   MiniLM's dimension): wall time, documents/s, chunks/s, peak RSS, KB size on disk, and
   phases timed by wrapping the pipeline's pieces (the ingest code reports none itself):
   read+curate (the document iterator), admit (content hash + lookup), chunking, embedding,
   SQLite store (the rest of each committed batch), faiss add and the final index save.
2. ``encoder``: the real all-MiniLM-L6-v2 encoder (``medverify.kb.embed.minilm()``, the
   packaged model, offline) on a seeded sample of the same section documents, chunked as
   ingest chunks them with MiniLM's tokenizer (``--minilm-sample`` chunks, embedded in
   batches of ``kb.flush_chunks`` texts, the title prefixed as ingest does); the hash
   embedder and both tokenizers' chunking are timed on the same documents. From these, an
   estimated MiniLM ingest time for ``--n`` studies (the formula is in the output).
3. ``slice``: measured end-to-end ingests of the first ``--slice`` studies, with hash-384
   and with MiniLM, to check the estimate on that slice (estimate vs measured).
4. ``search``: latency over the ``--n``-study hash-384 KB: p50/p95 over ``--queries``
   claims built from the KB's own section sentences (the first sentence of a seeded sample
   of chunks; every third with one number changed), for hybrid, lexical-only and
   dense-only search (k=7) through ``medverify.retrieve.Retriever``, query embedding
   excluded (timed and subtracted as in ``bench_search_latency.py``); and MiniLM's
   query-embedding latency on the same texts, so hybrid-with-MiniLM = hybrid + embedding.
5. Extrapolation to the registry's 520,000 studies (and the ~68,000 with results), from
   the measured per-study costs and ``benchmarks/results/trials_read.json`` (read, not
   rerun): hours on one machine like this one and on M machines splitting the studies.

    .venv/bin/python benchmarks/bench_trials_kb.py [--n 100000] [--seed 0] \
        [--minilm-sample 2000] [--slice 300] [--queries 200]

Writes benchmarks/results/trials_kb.json and trials_kb.md. The KBs and the zip live in a
temporary directory, deleted at the end. ``--reuse EARLIER.json`` keeps parts 1 (hash
ingest) and 4 (search) of an earlier run and remeasures only the MiniLM parts (the
slow part, and the one most sensitive to other load on a shared machine);
``--render RESULTS.json [--note TEXT ...]`` recomputes the estimates and rewrites the
outputs without measuring.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from bench_trials_kb_report import MB, markdown

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SECTIONS = 15  # documents per study (curated summary sections)
REGISTRY = 520_000  # studies in the registry
WITH_RESULTS = 68_000  # studies with posted results (the paper's pool)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / MB


def _peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _dir_bytes(path: Path) -> dict[str, int]:
    return {f.name: f.stat().st_size for f in sorted(path.iterdir()) if f.is_file()}


def percentiles(values: list[float]) -> dict[str, float]:
    ms = sorted(v * 1000 for v in values)
    return {"p50_ms": round(statistics.median(ms), 2),
            "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 2),
            "mean_ms": round(statistics.fmean(ms), 2)}


class Timers(dict[str, float]):
    def add(self, name: str, seconds: float) -> None:
        self[name] = self.get(name, 0.0) + seconds


class TimedTokenizer:
    def __init__(self, inner: Any, timers: Timers) -> None:
        self.inner, self.timers = inner, timers

    def offsets(self, text: str) -> list[tuple[int, int]]:
        started = time.perf_counter()
        out = self.inner.offsets(text)
        self.timers.add("tokenize", time.perf_counter() - started)
        return out  # type: ignore[no-any-return]


class TimedEmbedder:
    """Wraps an embedder: same id, dim and tokenizer; times ``embed`` and the tokenizer
    calls chunking makes (the inner embedder's own tokenizer, used by MiniLM to window
    long texts, is not wrapped)."""

    def __init__(self, inner: Any, timers: Timers) -> None:
        self.inner, self.timers = inner, timers
        self.id, self.dim = inner.id, inner.dim
        self.tokenizer = TimedTokenizer(inner.tokenizer, timers)
        self.last = 0.0

    def embed(self, texts: list[str]) -> np.ndarray:
        started = time.perf_counter()
        out = self.inner.embed(texts)
        self.last = time.perf_counter() - started
        self.timers.add("embed", self.last)
        return out  # type: ignore[no-any-return]


def _timed_iter(items: Iterable[Any], timers: Timers, name: str) -> Iterator[Any]:
    iterator = iter(items)
    while True:
        started = time.perf_counter()
        try:
            item = next(iterator)
        except StopIteration:
            timers.add(name, time.perf_counter() - started)
            return
        timers.add(name, time.perf_counter() - started)
        yield item


def _load_embedder(name: str) -> Any:
    from medverify.kb.embed import get_embedder, minilm

    return minilm() if name == "minilm" else get_embedder(name)


def _torch_threads() -> int | None:
    try:
        import torch
    except ImportError:
        return None
    return int(torch.get_num_threads())


# ---- child: ingest --------------------------------------------------------------------


def _install_timers(timers: Timers) -> None:
    """Time the ingest's phases into ``timers``: flush, admit, faiss add, index save and
    chunking (patched into the classes of this child process)."""
    import medverify.kb.index as index_mod
    import medverify.kb.ingest as ingest_mod

    def wrap(owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                timers.add(label, time.perf_counter() - t0)

        setattr(owner, name, timed)

    wrap(ingest_mod.Ingester, "_flush", "flush")
    wrap(ingest_mod.Ingester, "_admit", "admit")
    wrap(index_mod.VectorIndex, "add", "faiss_add")
    wrap(index_mod.VectorIndex, "save", "index_save")
    original_chunk = ingest_mod.Ingester._chunk

    def timed_chunk(self: Any, doc: Any) -> Iterator[Any]:
        return _timed_iter(original_chunk(self, doc), timers, "chunk")

    ingest_mod.Ingester._chunk = timed_chunk  # type: ignore[method-assign]


def child_ingest(zip_path: str, kb_dir: str, embedder_name: str, studies: int) -> dict:
    """Ingest the first ``studies`` studies of the zip into a new KB, as the CLI does."""
    from medverify.kb import KnowledgeBase, LoadReport
    from medverify.kb.loaders import iter_ctgov

    timers = Timers()
    started = time.perf_counter()
    base = _load_embedder(embedder_name)
    load_seconds = time.perf_counter() - started
    embedder = TimedEmbedder(base, timers)

    _install_timers(timers)

    docs_total = studies * SECTIONS
    every = max(1, docs_total // 10)
    timeline: list[list[float]] = []
    report = LoadReport()
    rss_before = _rss_mb()

    def progress(stats: Any) -> None:
        if stats.documents_seen % every == 0 and (not timeline
                                                  or timeline[-1][0] != stats.documents_seen):
            timeline.append([stats.documents_seen, round(time.perf_counter() - begin, 2),
                             stats.chunks_added, round(_rss_mb(), 1)])

    begin = time.perf_counter()
    with KnowledgeBase.open_or_create(Path(kb_dir), None, embedder) as kb:  # type: ignore[arg-type]
        flush_chunks = kb.flush_chunks
        documents = _timed_iter(iter_ctgov([zip_path], report, limit=docs_total), timers,
                                "read_curate")
        stats = kb.ingest(documents, progress=progress)
        wall_ingest = time.perf_counter() - begin
        summary = kb.stats()
    wall = time.perf_counter() - begin
    flush = timers.get("flush", 0.0)
    phases = {
        "read_curate": timers.get("read_curate", 0.0),
        "admit_hash_lookup": timers.get("admit", 0.0),
        "chunk": timers.get("chunk", 0.0),
        "embed": timers.get("embed", 0.0),
        "sqlite_store": flush - timers.get("embed", 0.0) - timers.get("faiss_add", 0.0),
        "faiss_add": timers.get("faiss_add", 0.0),
        "index_save": timers.get("index_save", 0.0),
    }
    phases["other"] = stats.seconds - sum(phases.values())
    return {
        "embedder": embedder_name,
        "embedder_id": base.id,
        "embedder_load_seconds": round(load_seconds, 2),
        "torch_threads": _torch_threads(),
        "studies": studies,
        "flush_chunks": flush_chunks,
        "documents_added": stats.documents_added,
        "documents_empty": stats.documents_empty,
        "chunks": stats.chunks_added,
        "ingest_seconds": round(stats.seconds, 2),
        "wall_seconds_incl_close_and_stats": round(wall, 2),
        "wall_seconds_ingest_call": round(wall_ingest, 2),
        "documents_per_s": round(stats.documents_seen / stats.seconds, 1),
        "chunks_per_s": round(stats.chunks_added / stats.seconds, 1),
        "studies_per_s": round(studies / stats.seconds, 2),
        "phases_seconds": {k: round(v, 2) for k, v in phases.items()},
        "tokenize_seconds_within_chunk": round(timers.get("tokenize", 0.0), 2),
        "rss_before_mb": round(rss_before, 1),
        "peak_rss_mb": _peak_mb(),
        "timeline_docs_seconds_chunks_rssmb": timeline,
        "kb_files_bytes": _dir_bytes(Path(kb_dir)),
        "kb_size_bytes": summary.size_bytes,
        "kb_documents": summary.documents,
        "kb_chunks": summary.chunks,
        "skipped": len(report.skipped),
    }


# ---- child: encoder sample --------------------------------------------------------------


def child_encoder(zip_path: str, n: int, sample: int, seed: int) -> dict:
    """MiniLM encoder rate (and hash-384's, and both tokenizers' chunking) on a seeded
    sample of section documents, chunked as ingest chunks them."""
    from medverify.config import KBSettings
    from medverify.kb import KnowledgeBase  # noqa: F401  (same import cost as ingest)
    from medverify.kb.chunking import WINDOW_CHARS, iter_chunks
    from medverify.kb.embed import get_embedder, minilm
    from medverify.kb.ingest import _embed_text
    from medverify.kb.loaders import iter_ctgov

    settings = KBSettings()
    flush = settings.batch_size * 4  # KnowledgeBase.flush_chunks
    trials = min(n, max(1, math.ceil(sample / SECTIONS * 1.5)))
    started = time.perf_counter()
    docs = list(iter_ctgov([zip_path], sample=trials, seed=seed))
    select_seconds = time.perf_counter() - started
    random.Random(seed).shuffle(docs)
    mini = minilm()
    hashed = get_embedder("hash-384")

    def chunk_all(tokenizer: Any, chosen: list[Any]) -> tuple[list[str], float]:
        texts: list[str] = []
        t0 = time.perf_counter()
        for doc in chosen:
            for chunk in iter_chunks([doc.text], tokenizer, settings.chunk_tokens,
                                     settings.chunk_overlap, WINDOW_CHARS):
                texts.append(_embed_text(doc.title, chunk))
        return texts, time.perf_counter() - t0

    # documents, in seeded order, until their MiniLM chunks reach ``sample``
    chosen: list[Any] = []
    count = 0
    for doc in docs:
        if count >= sample:
            break
        chosen.append(doc)
        count += sum(1 for _ in iter_chunks([doc.text], mini.tokenizer, settings.chunk_tokens,
                                             settings.chunk_overlap, WINDOW_CHARS))
    mini_texts, mini_chunk_s = chunk_all(mini.tokenizer, chosen)
    hash_texts, hash_chunk_s = chunk_all(hashed.tokenizer, chosen)
    windows = len(mini._windows(mini_texts)[0])

    def embed_all(embedder: Any, texts: list[str]) -> float:
        t0 = time.perf_counter()
        for i in range(0, len(texts), flush):
            embedder.embed(texts[i:i + flush])
        return time.perf_counter() - t0

    mini.embed(mini_texts[:flush])  # warm up (first batches allocate)
    mini_s = embed_all(mini, mini_texts)
    hash_s = embed_all(hashed, hash_texts)
    return {
        "trials_sampled": trials,
        "documents": len(chosen),
        "select_seconds": round(select_seconds, 2),
        "torch_threads": _torch_threads(),
        "batch_texts_per_embed_call": flush,
        "minilm_chunks": len(mini_texts),
        "minilm_windows": windows,
        "minilm_chunks_per_doc": len(mini_texts) / len(chosen),
        "hash_chunks": len(hash_texts),
        "hash_chunks_per_doc": len(hash_texts) / len(chosen),
        "mean_chars_per_minilm_chunk": round(statistics.fmean(len(t) for t in mini_texts), 1),
        "minilm_embed_seconds": round(mini_s, 2),
        "minilm_chunks_per_s": round(len(mini_texts) / mini_s, 2),
        "hash_embed_seconds": round(hash_s, 3),
        "hash_chunks_per_s": round(len(hash_texts) / hash_s, 1),
        "minilm_chunking_s_per_doc": mini_chunk_s / len(chosen),
        "hash_chunking_s_per_doc": hash_chunk_s / len(chosen),
        "peak_rss_mb": _peak_mb(),
    }


# ---- child: search ----------------------------------------------------------------------


def make_queries(kb_dir: str, n: int, seed: int) -> tuple[list[str], int]:
    """Claims from the KB's own sentences: the first line (one curated sentence) of a
    seeded sample of chunks; every third has one number changed."""
    import sqlite3

    rng = random.Random(seed)
    conn = sqlite3.connect(Path(kb_dir) / "kb.sqlite")
    top = conn.execute("SELECT max(id) FROM chunks").fetchone()[0]
    out: list[str] = []
    seen: set[str] = set()
    changed = 0
    tries = 0
    while len(out) < n and tries < 100 * n:
        tries += 1
        row = conn.execute("SELECT text FROM chunks WHERE id=?",
                           (rng.randint(1, top),)).fetchone()
        if row is None:
            continue
        sentence = row[0].strip().split("\n")[0].strip()[:400]
        if len(sentence.split()) < 5 or sentence in seen:
            continue
        seen.add(sentence)
        if len(out) % 3 == 2:
            numbers = list(_NUMBER.finditer(sentence))
            if numbers:
                m = rng.choice(numbers)
                value = float(m.group())
                new = value * rng.choice((2, 3)) + rng.randint(1, 9)
                text = f"{new:.1f}" if "." in m.group() else str(int(new))
                sentence = sentence[:m.start()] + text + sentence[m.end():]
                changed += 1
        out.append(sentence)
    conn.close()
    return out, changed


def child_search(kb_dir: str, n_queries: int, seed: int) -> dict:
    from medverify.kb import KnowledgeBase
    from medverify.kb.embed import get_embedder, minilm
    from medverify.retrieve import Retriever

    qs, changed = make_queries(kb_dir, n_queries, seed)
    timers = Timers()
    timed = TimedEmbedder(get_embedder("hash-384"), timers)
    started = time.perf_counter()
    with KnowledgeBase.open(Path(kb_dir), embedder=timed) as kb:  # type: ignore[arg-type]
        for mode in ("hybrid", "lexical", "dense"):  # warm up: load the faiss index
            Retriever(kb).search(qs[0], k=7, mode=mode)  # type: ignore[arg-type]
        warm_seconds = time.perf_counter() - started
        hybrid, hybrid_embed, lexical, dense = [], [], [], []
        for q in qs:
            t0 = time.perf_counter()
            Retriever(kb).search(q, k=7, mode="hybrid")
            hybrid.append(time.perf_counter() - t0 - timed.last)
            hybrid_embed.append(timed.last)
            t0 = time.perf_counter()
            Retriever(kb).search(q, k=7, mode="lexical")
            lexical.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            Retriever(kb).search(q, k=7, mode="dense")
            dense.append(time.perf_counter() - t0 - timed.last)
        stats = kb.stats()
    peak_search = _peak_mb()
    mini = minilm()
    mini.embed([qs[0]])
    mini.embed([qs[1]])  # warm up
    embed = []
    for q in qs:
        t0 = time.perf_counter()
        mini.embed([q])
        embed.append(time.perf_counter() - t0)
    return {
        "chunks": stats.chunks, "documents": stats.documents, "queries": len(qs),
        "queries_with_number_changed": changed, "k": 7,
        "example_queries": qs[:3],
        "open_and_warm_up_seconds": round(warm_seconds, 2),
        "hybrid_without_embedding": percentiles(hybrid),
        "lexical_only": percentiles(lexical),
        "dense_only_without_embedding": percentiles(dense),
        "hash_query_embedding": percentiles(hybrid_embed),
        "minilm_query_embedding": percentiles(embed),
        "torch_threads": _torch_threads(),
        "peak_rss_mb_search": peak_search,
        "peak_rss_mb_with_minilm": _peak_mb(),
    }


# ---- orchestration ----------------------------------------------------------------------


def run_child(*argv: str) -> dict:
    load_before = os.getloadavg()[0]
    out = subprocess.run([sys.executable, __file__, "--child", *argv], check=False,
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-4000:])
        raise SystemExit(f"child {argv[0]} failed (exit {out.returncode})")
    result: dict = json.loads(out.stdout.strip().splitlines()[-1])
    result["load_avg_1m_before_after"] = [round(load_before, 2),
                                          round(os.getloadavg()[0], 2)]
    return result


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def estimate(hash_run: dict, enc: dict, studies: int) -> dict:
    """Estimated MiniLM ingest seconds for ``studies`` studies from a hash-384 ingest."""
    docs = studies * SECTIONS
    non_embed = hash_run["ingest_seconds"] - hash_run["phases_seconds"]["embed"]
    minilm_chunks = hash_run["chunks"] * enc["minilm_chunks_per_doc"] / enc["hash_chunks_per_doc"]
    encode = minilm_chunks / enc["minilm_chunks_per_s"]
    tokenizer_extra = docs * (enc["minilm_chunking_s_per_doc"] - enc["hash_chunking_s_per_doc"])
    sample_hash_embed = hash_run["chunks"] / enc["hash_chunks_per_s"]
    basic = hash_run["ingest_seconds"] - sample_hash_embed + encode
    return {
        "studies": studies,
        "hash_ingest_seconds": hash_run["ingest_seconds"],
        "hash_embed_seconds_in_ingest": hash_run["phases_seconds"]["embed"],
        "hash_embed_seconds_from_sample_rate": round(sample_hash_embed, 2),
        "minilm_chunks_estimated": round(minilm_chunks),
        "minilm_encode_seconds": round(encode, 1),
        "tokenizer_extra_seconds": round(tokenizer_extra, 1),
        "basic_seconds": round(basic, 1),
        "corrected_seconds": round(non_embed + tokenizer_extra + encode, 1),
        "non_embedding_seconds": round(non_embed + tokenizer_extra, 1),
        "minilm_chunks_per_s_used": enc["minilm_chunks_per_s"],
    }


def extrapolate(result: dict) -> dict:
    ing = result["ingest_hash"]
    ph = ing["phases_seconds"]
    est = result["estimate_n"]
    n = ing["studies"]
    read = json.loads((RESULTS / "trials_read.json").read_text("utf-8"))
    rc = next(r for r in read["runs"] if r["mode"] == "read+curate")
    timeline = ing["timeline_docs_seconds_chunks_rssmb"]
    if len(timeline) >= 2:
        (d0, t0, *_), (d1, t1, *_) = timeline[-2], timeline[-1]
        last_s_per_study = (t1 - t0) / ((d1 - d0) / SECTIONS)
    else:
        last_s_per_study = ing["ingest_seconds"] / n
    serial_hash = ph["sqlite_store"] + ph["faiss_add"] + ph["index_save"] + ph["admit_hash_lookup"]
    minilm_total = est["corrected_seconds"]
    parallel_minilm = minilm_total - serial_hash
    out: dict[str, Any] = {
        "read_curate_studies_per_s_measured_trials_read_json": rc["records_per_s"],
        "read_curate_hours_520k_estimated": round(REGISTRY / rc["records_per_s"] / 3600, 2),
        "hash_ingest_s_per_study_measured": round(ing["ingest_seconds"] / n, 5),
        "hash_ingest_s_per_study_last_decile_measured": round(last_s_per_study, 5),
        "minilm_ingest_s_per_study_estimated": round(minilm_total / n, 5),
        "serial_share_of_minilm_ingest_estimated": round(serial_hash / minilm_total, 4),
        "serial_s_per_study_measured": round(serial_hash / n, 5),
        "parallel_s_per_study_estimated": round(parallel_minilm / n, 5),
        "kb_bytes_per_study_measured": round(ing["kb_size_bytes"] / n),
        "chunks_per_study_measured": round(ing["chunks"] / n, 2),
    }
    for label, studies in (("520k", REGISTRY), ("68k_with_results", WITH_RESULTS)):
        extra = max(0, studies - n)
        hash_h = (ing["ingest_seconds"] * min(studies, n) / n + extra * last_s_per_study) / 3600
        minilm_h = minilm_total / n * studies / 3600
        rows = {}
        for m in (1, 2, 4, 8, 16, 32):
            rows[str(m)] = round((parallel_minilm / n * studies / m
                                  + serial_hash / n * studies) / 3600, 2)
        out[label] = {
            "hash384_hours_one_machine_estimated": round(hash_h, 2),
            "minilm_hours_one_machine_estimated": round(minilm_h, 2),
            "minilm_hours_on_M_machines_estimated": rows,
            "kb_gb_estimated": round(ing["kb_size_bytes"] / n * studies / 1e9, 1),
            "faiss_flat_ram_gb_estimated": round(ing["chunks"] / n * studies * 384 * 4 / 1e9, 1),
            "dense_p50_ms_estimated_linear": round(
                result["search"]["dense_only_without_embedding"]["p50_ms"] * studies / n, 1),
        }
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="studies in the KB")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--minilm-sample", type=int, default=2000, help="chunks to encode")
    parser.add_argument("--slice", type=int, default=300, help="studies ingested with MiniLM")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--name", default="trials_kb", help="results file stem")
    parser.add_argument("--reuse", type=Path, help="take parts 1a and 2 (hash ingest, "
                        "search) from this earlier results JSON; rerun only the MiniLM parts")
    parser.add_argument("--note", action="append", default=[],
                        help="a line to add to the notes (e.g. the machine's load)")
    parser.add_argument("--render", type=Path,
                        help="recompute the derived numbers and notes of a results JSON and "
                        "rewrite the outputs (no measuring)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = _parser().parse_args()
    if args.child:
        kind, *rest = args.child
        handlers: dict[str, Callable[..., dict]] = {
            "ingest": lambda z, k, e, s: child_ingest(z, k, e, int(s)),
            "encoder": lambda z, n, s, seed: child_encoder(z, int(n), int(s), int(seed)),
            "search": lambda k, q, seed: child_search(k, int(q), int(seed)),
        }
        print(json.dumps(handlers[kind](*rest)))
        return

    if args.render:
        result = json.loads(args.render.read_text("utf-8"))
        finish(result, args)
        return
    sys.path.insert(0, str(ROOT / "src"))
    from medverify.trials.synthetic import write_bulk_zip

    command = (f".venv/bin/python benchmarks/bench_trials_kb.py --n {args.n} --seed {args.seed} "
               f"--minilm-sample {args.minilm_sample} --slice {args.slice} "
               f"--queries {args.queries}")
    if args.reuse:
        command += f" --reuse {args.reuse}"
    result: dict[str, Any] = {
        "command": command,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs visible (shared), "
        f"Python {platform.python_version()}",
    }
    slice_n = min(args.slice, args.n)
    with tempfile.TemporaryDirectory(prefix="trials-kb-bench-") as tmp:
        zip_path = Path(tmp) / "ctg-studies.json.zip"
        log(f"writing a zip of {args.n} synthetic studies")
        started = time.perf_counter()
        write_bulk_zip(zip_path, args.n, args.seed)
        with zipfile.ZipFile(zip_path) as zf:
            uncompressed = sum(info.file_size for info in zf.infolist())
        result["zip"] = {"records": args.n, "size_mb": round(zip_path.stat().st_size / MB, 1),
                         "uncompressed_mb": round(uncompressed / MB, 1),
                         "write_seconds": round(time.perf_counter() - started, 1)}
        log(f"zip: {result['zip']}")
        kb = Path(tmp) / "kb-hash"
        if args.reuse:
            earlier = json.loads(args.reuse.read_text("utf-8"))
            if earlier["ingest_hash"]["studies"] != args.n:
                raise SystemExit(f"{args.reuse} is for another --n")
            result["ingest_hash"], result["search"] = earlier["ingest_hash"], earlier["search"]
            result["reused_from"] = {"command": earlier["command"],
                                     "encoder": earlier.get("encoder"),
                                     "slice": earlier.get("slice")}
        else:
            log(f"ingest {args.n} studies with hash-384")
            result["ingest_hash"] = run_child("ingest", str(zip_path), str(kb), "hash-384",
                                              str(args.n))
            log(f"ingest: {result['ingest_hash']['ingest_seconds']} s, "
                f"{result['ingest_hash']['chunks']} chunks, phases "
                f"{result['ingest_hash']['phases_seconds']}")
            log("search latency")
            result["search"] = run_child("search", str(kb), str(args.queries), str(args.seed))
            log(f"search: hybrid {result['search']['hybrid_without_embedding']}")
        log("MiniLM encoder sample")
        result["encoder"] = run_child("encoder", str(zip_path), str(args.n),
                                      str(args.minilm_sample), str(args.seed))
        log(f"encoder: {result['encoder']['minilm_chunks_per_s']} chunks/s")
        log(f"slice of {slice_n} studies: hash-384, then MiniLM")
        slice_hash = run_child("ingest", str(zip_path), str(Path(tmp) / "kb-slice-hash"),
                               "hash-384", str(slice_n))
        slice_minilm = run_child("ingest", str(zip_path), str(Path(tmp) / "kb-slice-minilm"),
                                 "minilm", str(slice_n))
        log(f"slice: hash {slice_hash['ingest_seconds']} s, MiniLM "
            f"{slice_minilm['ingest_seconds']} s")
    result["slice"] = {"studies": slice_n, "hash": slice_hash, "minilm": slice_minilm}
    finish(result, args)


def finish(result: dict, args: argparse.Namespace) -> None:
    """Derived numbers (estimates, extrapolation), notes, and the output files."""
    slice_n = result["slice"]["studies"]
    result["slice"]["estimate"] = estimate(result["slice"]["hash"], result["encoder"], slice_n)
    result["estimate_n"] = estimate(result["ingest_hash"], result["encoder"],
                                    result["ingest_hash"]["studies"])
    result["extrapolation"] = extrapolate(result)
    result["notes"] = [
        "All ingest runs are single processes on a shared 2-CPU machine; only MiniLM "
        "encoding uses both cores (torch threads). Phases are timed by wrapping the ingest "
        "pipeline's functions (iterator next(), `Ingester._admit`, `Ingester._chunk`, the "
        "embedder's `embed`, `Ingester._flush`, `VectorIndex.add`/`save`); 'other' is the "
        "remainder (progress callback, loop overhead).",
        "MiniLM ingest chunks with MiniLM's WordPiece tokenizer, hash-384 with a word "
        "tokenizer: chunk counts and chunking cost differ, hence the tokenizer term.",
        "Serial share: when the studies are split across M machines, each machine reads, "
        "curates, chunks and embeds its share; writing one KB (SQLite rows, FTS5, term "
        "counts, faiss) stays on one machine and is costed at the hash run's measured store "
        "time. Alternatively each machine keeps its own KB shard and searches fan out (no "
        "serial part).",
        "Extrapolated latency assumes the flat (exact) faiss index, whose scan grows "
        "linearly with the chunk count; lexical (FTS5) latency is not extrapolated.",
        "The machine is shared: MiniLM's rate on 2 torch threads drops when other "
        "processes run, so the encoder sample and the slice run back to back; each part's "
        "1-minute load average before and after it is recorded as "
        "`load_avg_1m_before_after` (absent in results rendered from runs made before it "
        "was added).",
        *args.note,
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    (RESULTS / f"{args.name}.md").write_text(markdown(result), "utf-8")
    print(markdown(result))


if __name__ == "__main__":
    main()
