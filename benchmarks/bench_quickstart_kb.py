"""How long the README's knowledge-base steps take with the default embedder.

1. ``medverify kb ingest --sample``: the MedQuAD sample shipped with medverify, measured
   whole, as a user runs it (a child process: start-up and model loading included).
2. ``medverify kb ingest ../shared/data/raw/medquad``: all of MedQuAD (11,274 XML files)
   takes too long to run here, so a seeded random subset of ``--files`` XML files is
   ingested the same way and the whole is **extrapolated** from it: the XML files at the
   subset's seconds per file, plus the folder's other files (a 3.5 MB CSV of answers and
   a few text files, read as text) at the sample's MB of text per second, plus one model
   load. A bootstrap over the subset's files (their chunk counts) gives the interval that
   sampling alone puts on the extrapolation; the load of the machine is recorded, and
   timing noise is not in the interval.

    .venv/bin/python benchmarks/bench_quickstart_kb.py [--files 300] [--seed 0]

Writes benchmarks/results/quickstart_kb.json and quickstart_kb.md. The rates it prints
for the ingest warning are the ones ``medverify kb ingest`` quotes (``FILES_PER_S``,
``MB_PER_S`` in ``src/medverify/cli/kb.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[1]
MEDQUAD = data_dir() / "raw" / "medquad"
RESULTS = ROOT / "benchmarks" / "results"
CLI = Path(sys.executable).parent / "medverify"
ADDED = re.compile(r"added (\d+) documents \((\d+) chunks\).* in ([\d.]+)s")


def run_ingest(args: list[str]) -> dict[str, float]:
    """Run ``medverify kb ingest ARGS`` and return its documents, chunks and times."""
    started = time.perf_counter()
    done = subprocess.run([str(CLI), "kb", "ingest", *args], capture_output=True, text=True,
                          check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"kb ingest failed ({done.returncode}): {done.stdout}{done.stderr}")
    found = ADDED.search(done.stdout)
    if found is None:
        raise SystemExit(f"no summary line in: {done.stdout}")
    return {"documents": int(found[1]), "chunks": int(found[2]),
            "ingest_seconds": max(float(found[3]), 0.05),  # printed to 0.1 s
            "wall_seconds": round(wall, 2)}


def chunks_per_file(files: list[Path], kb_dir: Path) -> list[int]:
    """Chunks each file put into the KB (0 for a MedQuAD file without an answer)."""
    from medverify.kb import LoadReport, iter_documents

    with sqlite3.connect(kb_dir / "kb.sqlite") as conn:
        stored = dict(conn.execute("SELECT doc_id, n_chunks FROM documents").fetchall())
    return [sum(stored.get(d.doc_id, 0) for d in iter_documents([f], LoadReport()))
            for f in files]


def bootstrap_total(per_file: list[int], total_files: int, seed: int,
                    rounds: int = 2000) -> tuple[float, float]:
    """95 % interval of the corpus's chunk total from resampling the subset's files."""
    rng = random.Random(seed)
    n = len(per_file)
    totals = sorted(sum(rng.choices(per_file, k=n)) * total_files / n for _ in range(rounds))
    return totals[int(0.025 * rounds)], totals[int(0.975 * rounds) - 1]


class LoadSampler:
    """The 1-minute load average every 5 s while the ingests run (other jobs share the
    machine: a busy one slows the embedder)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(5.0):
            self.samples.append(os.getloadavg()[0])

    def summary(self) -> dict[str, float]:
        self.stop.set()
        self.thread.join()
        got = self.samples or [os.getloadavg()[0]]
        return {"mean": round(sum(got) / len(got), 2), "max": round(max(got), 2),
                "samples": len(got)}


def measure(n_files: int, seed: int, work: Path, embedder: list[str]) -> dict[str, object]:
    from medverify.kb import sample_kb_path

    load_before = os.getloadavg()
    sampler = LoadSampler()
    sampler.thread.start()
    sample = run_ingest(["--sample", "--kb", str(work / "sample"), *embedder])
    sample_mb = sample_kb_path().stat().st_size / 1e6
    xml = sorted(MEDQUAD.rglob("*.xml"))
    others = [p for p in MEDQUAD.rglob("*") if p.is_file() and p.suffix != ".xml"
              and not any(part.startswith(".") for part in p.relative_to(MEDQUAD).parts)]
    subset = sorted(random.Random(seed).sample(xml, n_files))
    part = run_ingest([*map(str, subset), "--kb", str(work / "subset"), *embedder])
    load_after = os.getloadavg()
    load_during = sampler.summary()
    per_file = chunks_per_file(subset, work / "subset")
    low, high = bootstrap_total(per_file, len(xml), seed)
    s_per_chunk = part["ingest_seconds"] / max(part["chunks"], 1)
    other_mb = sum(p.stat().st_size for p in others) / 1e6
    mb_per_s = sample_mb / sample["ingest_seconds"]
    model_load = part["wall_seconds"] - part["ingest_seconds"]
    xml_s = part["ingest_seconds"] * len(xml) / n_files
    total_s = model_load + xml_s + other_mb / mb_per_s
    return {
        "embedder": embedder[1] if embedder else "all-MiniLM-L6-v2 (default, fp32)",
        "machine": {"cpus": os.cpu_count(), "load_before": load_before,
                    "load_after": load_after, "load_during": load_during},
        "sample": {**sample, "mb": round(sample_mb, 2)},
        "subset": {**part, "files": n_files, "seed": seed,
                   "files_with_chunks": sum(1 for c in per_file if c)},
        "full_medquad_extrapolated": {
            "xml_files": len(xml), "other_files": len(others), "other_mb": round(other_mb, 2),
            "chunks_xml_estimate": round(part["chunks"] * len(xml) / n_files),
            "chunks_xml_95": [round(low), round(high)],
            "seconds": round(total_s), "seconds_xml": round(xml_s),
            "seconds_other": round(other_mb / mb_per_s), "seconds_model_load": round(model_load, 1),
            "seconds_95_sampling": [round(model_load + low * s_per_chunk + other_mb / mb_per_s),
                                    round(model_load + high * s_per_chunk + other_mb / mb_per_s)],
        },
        "warning_rates": {"files_per_s": round(n_files / part["ingest_seconds"], 2),
                          "mb_per_s": round(mb_per_s, 4),
                          "chunks_per_s": round(part["chunks"] / part["ingest_seconds"], 1)},
    }


def row(what: str, run: dict[str, float]) -> str:
    return (f"| {what} | {run['documents']} | {run['chunks']} | {run['ingest_seconds']:.1f} "
            f"| {run['wall_seconds']:.1f} |")


def markdown(r: dict[str, object]) -> str:
    m, s, p, f = r["machine"], r["sample"], r["subset"], r["full_medquad_extrapolated"]
    w = r["warning_rates"]
    d = m["load_during"]
    load = (f"1-minute load average {m['load_before'][0]:.2f} before, mean {d['mean']} "
            f"(max {d['max']}) while running")
    return f"""# Quickstart KB: how long the README's ingest steps take

`python benchmarks/bench_quickstart_kb.py`; embedder {r['embedder']},
chunks 512/100, {m['cpus']} CPU cores, {load}. Each ingest is
`medverify kb ingest` in a child process, so "wall" includes start-up and model loading.

| what | documents | chunks | ingest s | wall s |
|---|---|---|---|---|
{row(f"`kb ingest --sample` (shipped MedQuAD sample, {s['mb']} MB JSONL)", s)}
{row(f"`kb ingest` of {p['files']} MedQuAD XML files (seed {p['seed']}; "
        f"{p['files_with_chunks']} hold an answer)", p)}

**All of MedQuAD (`kb ingest ../shared/data/raw/medquad`), extrapolated, not measured:**
about **{f['seconds'] / 60:.0f} minutes** ({f['seconds']:,} s; sampling interval
{f['seconds_95_sampling'][0] / 60:.0f}-{f['seconds_95_sampling'][1] / 60:.0f} min). From: the
{f['xml_files']:,} XML files at the subset's {p['ingest_seconds'] / p['files']:.3f} s per file
({f['seconds_xml']:,} s; ~{f['chunks_xml_estimate']:,} chunks, 95 % bootstrap interval over
the subset's files {f['chunks_xml_95'][0]:,}-{f['chunks_xml_95'][1]:,}), plus the folder's
{f['other_files']} other files ({f['other_mb']} MB, mostly a CSV of answers, read as text)
at the sample's {w['mb_per_s']} MB/s ({f['seconds_other']:,} s), plus one start-up and model
load ({f['seconds_model_load']} s). The interval covers which files the subset drew, not timing
noise or a busier machine.

Rates `medverify kb ingest` quotes in its warning for large inputs: {w['files_per_s']}
MedQuAD XML files/s; other files at {w['mb_per_s']} MB/s of plain text, but at least one
chunk each at the subset's {w['chunks_per_s']} (short) chunks/s.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--embedder", help="another embedder (e.g. hash, to try the script)")
    parser.add_argument("--out", default="quickstart_kb", help="results file stem")
    parser.add_argument("--markdown-only", action="store_true",
                        help="rewrite the .md from the .json without measuring again")
    args = parser.parse_args()
    if args.markdown_only:
        text = markdown(json.loads((RESULTS / f"{args.out}.json").read_text("utf-8")))
        (RESULTS / f"{args.out}.md").write_text(text, "utf-8")
        return
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(args.files, args.seed, Path(tmp),
                         ["--embedder", args.embedder] if args.embedder else [])
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    text = markdown(result)
    (RESULTS / f"{args.out}.md").write_text(text, "utf-8")
    print(text)


if __name__ == "__main__":
    main()
