"""Ingest throughput (chunks/s) and peak memory on MedQuAD with the real MiniLM embedder.

The ingest runs in a child process so its peak RSS (``resource.getrusage``) is its own.
By default a deterministic subset is used (every ``--step``-th XML file over all 12
collections, sorted): embedding all ~5,500 answered documents takes about an hour on
2 cores. ``--step 1`` ingests everything.

    .venv/bin/python benchmarks/bench_ingest.py [--step 10]

Writes benchmarks/results/ingest.json and ingest.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[1]
MEDQUAD = data_dir() / "raw" / "medquad"
RESULTS = ROOT / "benchmarks" / "results"


def files(step: int) -> list[Path]:
    return sorted(MEDQUAD.glob("*/*.xml"))[::step]


def child(step: int, kb_dir: Path) -> None:
    from medverify.config import KBSettings
    from medverify.kb import KnowledgeBase, LoadReport, iter_documents

    report = LoadReport()
    started = time.perf_counter()
    with KnowledgeBase.create(kb_dir, KBSettings()) as kb:
        load_s = time.perf_counter() - started
        stats = kb.ingest(iter_documents(files(step), report))
        summary = kb.stats()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"files": report.files, "documents": stats.documents_added,
                      "skipped_files": len(report.skipped), "chunks": stats.chunks_added,
                      "ingest_seconds": stats.seconds, "model_load_seconds": load_s,
                      "chunks_per_second": stats.chunks_added / max(stats.seconds, 1e-9),
                      "documents_per_second": stats.documents_added / max(stats.seconds, 1e-9),
                      "peak_rss_mb": peak_kb / 1024, "kb_size_mb": summary.size_bytes / 1e6}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--step", type=int, default=10)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.step, args.child)
        return
    if not MEDQUAD.is_dir():
        sys.exit(f"{MEDQUAD} not found: this benchmark needs the shared data")
    with tempfile.TemporaryDirectory(prefix="mv-bench-ingest-") as tmp:
        out = subprocess.run([sys.executable, __file__, "--step", str(args.step), "--child",
                              str(Path(tmp) / "kb")], check=True, capture_output=True,
                             text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result.update(step=args.step, cpus=os.cpu_count(),
                  children_peak_rss_mb=resource.getrusage(
                      resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ingest.json").write_text(json.dumps(result, indent=2), "utf-8")
    md = (f"# Ingest benchmark (MedQuAD, every {args.step}th XML file, all-MiniLM-L6-v2, "
          f"{result['cpus']} CPUs)\n\n"
          f"- {result['documents']} documents ({result['files']} files, "
          f"{result['skipped_files']} without answers skipped), {result['chunks']} chunks\n"
          f"- {result['chunks_per_second']:.2f} chunks/s, "
          f"{result['documents_per_second']:.2f} documents/s "
          f"({result['ingest_seconds']:.0f} s)\n"
          f"- peak RSS {result['peak_rss_mb']:.0f} MB; KB on disk "
          f"{result['kb_size_mb']:.1f} MB\n")
    (RESULTS / "ingest.md").write_text(md, "utf-8")
    print(md)


if __name__ == "__main__":
    main()
