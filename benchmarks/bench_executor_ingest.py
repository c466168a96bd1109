"""`kb ingest --executor`: the same ingest locally and on a local Ray with 1 and 2 CPUs
(issue 19, part 3).

One process; a MedQuAD slice (every ``--step``-th XML file, sorted) is ingested into a
fresh KB with all-MiniLM-L6-v2 (fp32, CPU) in each configuration:

- ``local``: the default path (this process: one embedding thread, torch on every core);
- ``ray-1``, ``ray-2``: a local Ray started with 1 or 2 CPUs (one task per CPU, each task
  embedding 64 chunks with one torch thread); each is run twice on the same Ray: ``cold``
  (the workers load MiniLM on their first task) and ``warm``.

Local runs alternate with the Ray ones (the machine is shared; compare within a run), and
the load average is recorded around each. Also measured, with the ``hash`` embedder (no
model: the cost of the machinery alone), the overhead per task: 200 tasks of 64 short
texts each through ``RayExecutor.submit`` vs ``LocalExecutor.submit``, on warm workers.

Identity: every Ray KB is compared with the first local KB: documents, chunk rows and
texts, term counts must be equal; vectors byte for byte (both paths embed each 256-chunk
batch in the same 64-chunk calls, and one torch thread or two give the same bits), and
the top-10 dense and hybrid results (chunk ids and scores) of 50 of the slice's own
titles.

    .venv/bin/python benchmarks/bench_executor_ingest.py [--step 20]

Writes benchmarks/results/executor_ingest.json and executor_ingest.md. Needs ray
(`pip install 'medverify[ray]'`) and ../shared/data/raw/medquad.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from medverify.executor import Executor, LocalExecutor, RayExecutor
from medverify.files import data_dir
from medverify.kb import KnowledgeBase, LoadReport, iter_documents
from medverify.kb.embed import EmbedTask
from medverify.retrieve import Retriever

ROOT = Path(__file__).resolve().parents[1]
MEDQUAD = data_dir() / "raw" / "medquad"
RESULTS = ROOT / "benchmarks" / "results"


def files(step: int) -> list[Path]:
    return sorted(MEDQUAD.glob("*/*.xml"))[::step]


def ingest(paths: list[Path], where: Path, executor: Executor | None) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with KnowledgeBase.create(where, embedder="all-MiniLM-L6-v2") as kb:
        stats = kb.ingest(iter_documents(paths, LoadReport()), executor=executor)
        chunks = kb.stats().chunks
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 2), "chunks": chunks,
            "chunks_per_s": round(chunks / seconds, 2),
            "documents": stats.documents_added,
            "load": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


def rows(where: Path) -> dict[str, Any]:
    conn = sqlite3.connect(where / "kb.sqlite")
    try:
        return {
            "documents": conn.execute("SELECT doc_id, content_hash, n_chunks FROM documents "
                                      "ORDER BY id").fetchall(),
            "chunks": conn.execute('SELECT id, doc, ord, text, start, "end" FROM chunks '
                                   "ORDER BY id").fetchall(),
            "terms": conn.execute("SELECT term, df FROM terms ORDER BY term").fetchall(),
        }
    finally:
        conn.close()


def vectors(where: Path) -> np.ndarray:
    conn = sqlite3.connect(where / "kb.sqlite")
    try:
        return np.stack([np.frombuffer(v, dtype=np.float32)
                         for (v,) in conn.execute("SELECT vector FROM chunks ORDER BY id")])
    finally:
        conn.close()


def top10(where: Path) -> tuple[list[list[int]], list[list[tuple[str, float | None]]]]:
    """(dense top-10 chunk ids, hybrid top-10 passage ids and scores) of 50 titles."""
    with KnowledgeBase.open(where) as kb:
        titles = [t for (t,) in kb._conn.execute(
            "SELECT title FROM documents ORDER BY id LIMIT 50")]
        dense = [[chunk for chunk, _ in found] for found in kb.dense_candidates(titles, 10)]
        hybrid = [[(p.id, p.score) for p in found]
                  for found in Retriever(kb).search_many(titles, k=10, mode="hybrid")]
        return dense, hybrid


def compare(local: Path, other: Path) -> dict[str, Any]:
    a, b = vectors(local), vectors(other)
    same_rows = rows(local) == rows(other)
    (ta, ha), (tb, hb) = top10(local), top10(other)
    return {"rows_equal": same_rows,
            "vectors_bitwise_equal": bool(a.shape == b.shape and
                                          a.tobytes() == b.tobytes()),
            "vector_max_abs_diff": float(np.abs(a - b).max()) if a.shape == b.shape else None,
            "top10_equal_queries": sum(x == y for x, y in zip(ta, tb, strict=True)),
            "top10_queries": len(ta),
            "hybrid_top10_equal_queries": sum(x == y for x, y in zip(ha, hb, strict=True))}


def task_overhead(executor: Executor, tasks: int = 200) -> dict[str, float]:
    """Seconds per task of embedding 64 short texts with the hash embedder, 4 in flight."""
    task = EmbedTask.for_kb("hash-384", "hash-384", 384, "fp32", "cpu")
    texts = [f"metformin dose {i} mg daily with meals" for i in range(64)]
    task(texts)  # warm this process
    for future in [executor.submit(task, texts) for _ in range(4)]:
        future.result()  # warm the workers
    started = time.perf_counter()
    pending = []
    for _ in range(tasks):
        pending.append(executor.submit(task, texts))
        if len(pending) >= 4:
            pending.pop(0).result()
    for future in pending:
        future.result()
    return {"tasks": tasks, "ms_per_task": round(1000 * (time.perf_counter() - started) / tasks,
                                                 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--step", type=int, default=20)
    args = parser.parse_args()
    if not MEDQUAD.is_dir():
        sys.exit(f"needs {MEDQUAD}")
    paths = files(args.step)
    out: dict[str, Any] = {"step": args.step, "files": len(paths), "cpus": os.cpu_count(),
                           "runs": [], "overhead": {}, "identity": {}}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        local = LocalExecutor()
        out["overhead"]["local"] = task_overhead(local)
        local.close()
        first = ingest(paths, base / "local-1", None)
        out["runs"].append({"config": "local", "pass": 1, **first})
        print(out["runs"][-1], flush=True)
        for cpus in (2, 1):
            started = time.perf_counter()
            ray_executor = RayExecutor(num_cpus=cpus)
            ray_executor._connect()
            init_s = time.perf_counter() - started
            try:
                for label in ("cold", "warm"):
                    where = base / f"ray-{cpus}-{label}"
                    run = ingest(paths, where, ray_executor)
                    out["runs"].append({"config": f"ray-{cpus}", "pass": label,
                                        "ray_init_s": round(init_s, 2), **run})
                    print(out["runs"][-1], flush=True)
                    if label == "warm":
                        out["identity"][f"ray-{cpus}"] = compare(base / "local-1", where)
                out["overhead"][f"ray-{cpus}"] = task_overhead(ray_executor)
            finally:
                ray_executor.close()
            again = ingest(paths, base / f"local-after-ray-{cpus}", None)
            out["runs"].append({"config": "local", "pass": f"after ray-{cpus}", **again})
            print(out["runs"][-1], flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "executor_ingest.json").write_text(json.dumps(out, indent=2) + "\n", "utf-8")
    (RESULTS / "executor_ingest.md").write_text(render(out), "utf-8")
    print(render(out))


def render(out: dict[str, Any]) -> str:
    lines = [
        "# kb ingest on an executor: local vs a local Ray (1 and 2 CPUs)",
        "",
        f"`python benchmarks/bench_executor_ingest.py --step {out['step']}`: "
        f"{out['files']} MedQuAD files, all-MiniLM-L6-v2 fp32 on CPU, {out['cpus']} cores "
        "(shared machine: compare within this run; load average before/after each run).",
        "",
        "| configuration | pass | chunks | seconds | chunks/s | Ray start s | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in out["runs"]:
        lines.append(f"| {run['config']} | {run['pass']} | {run['chunks']} | {run['seconds']} "
                     f"| {run['chunks_per_s']} | {run.get('ray_init_s', '')} | "
                     f"{run['load'][0]} → {run['load'][1]} |")
    lines += ["", "Overhead per task (hash embedder, 64 short texts a task, 4 in flight):", "",
              "| executor | tasks | ms per task |", "|---|---|---|"]
    for name, over in out["overhead"].items():
        lines.append(f"| {name} | {over['tasks']} | {over['ms_per_task']} |")
    lines += ["", "Identity with the local KB (warm Ray runs):", "",
              "| run | rows equal | vectors bitwise equal | max abs vector diff "
              "| dense top-10 equal | hybrid top-10 (ids, scores) equal |",
              "|---|---|---|---|---|---|"]
    for name, same in out["identity"].items():
        lines.append(f"| {name} | {same['rows_equal']} | {same['vectors_bitwise_equal']} | "
                     f"{same['vector_max_abs_diff']:.2e} | {same['top10_equal_queries']}/"
                     f"{same['top10_queries']} | {same.get('hybrid_top10_equal_queries')}/"
                     f"{same['top10_queries']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
