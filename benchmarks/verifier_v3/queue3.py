"""Round 3's queue on the GPU machine (``queue3.py OUT DEADLINE_S``): runs ``go.py`` for each
job below, 6 at a time, biggest first; copies each finished run's verifier.json, its log's
tail and (size runs) its weights to OUT at once, so the time limit cuts only unfinished runs
(as archives: OUT brings back at most 8 files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

FULL, S50 = "/tmp/corpus.jsonl.gz", "/tmp/corpus50k.jsonl.gz"
LOO = {
    "negation": ["contradicted/negation"],
    "swaps": ["contradicted/condition_swap", "contradicted/drug_swap"],
    "direction": ["contradicted/direction"],
    "nei_bm25_hard": ["nei/bm25_hard"],
    "paraphrase": ["supported/clause_drop", "supported/fusion", "supported/synonym",
                   "supported/abbreviation"],
    "population": ["contradicted/population"],
    "quantifier": ["contradicted/quantifier"],
    "temporal_causal": ["contradicted/temporal_causal"],
    "nei_same_doc": ["nei/same_doc_other"],
    "nei_sentence_removed": ["nei/sentence_removed"],
    "unit_dose": ["contradicted/unit", "contradicted/dose_frequency"],
}
JOBS: list[tuple[str, dict[str, object]]] = [
    ("s1_200k_s2", {"corpus": FULL}),
    ("s1_100k_s2", {"corpus": FULL, "corpus_limit": 100_000}),
    *[(f"loo_{name}", {"corpus": S50, "exclude_edits": edits}) for name, edits in LOO.items()],
]

# round 3b: seed variation of the round-1 baseline and of stage 2 alone (how big a difference
# in the table above is noise)
SEEDS: list[tuple[str, dict[str, object]]] = [
    *[(f"seed{seed}_s1_50k_s2", {"corpus": S50, "seed": seed}) for seed in (14, 15, 16, 17)],
    *[(f"seed{seed}_s2only", {"seed": seed}) for seed in (14, 15, 16)],
]


def bundle(path: Path, files: list[Path]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for f in files:
            tar.add(f, arcname=f.name)
    os.replace(tmp, path)


def main() -> None:
    jobs, device = (SEEDS if os.environ.get("JOBSET") == "seeds" else JOBS), "cuda"
    if os.environ.get("SMOKE"):  # a CPU check of the queue itself, here: 2 tiny runs
        device = "cpu"
        jobs = [(n, {**f, "corpus_limit": 300, "real_limit": 120, "stage2_epochs": 1})
                for n, f in (JOBS[0], JOBS[2])]
    out, deadline = Path(sys.argv[1]), time.monotonic() + float(sys.argv[2])
    go = Path(__file__).with_name("go.py")
    res = Path("/tmp/res")
    res.mkdir(exist_ok=True)
    pending, running = list(jobs), {}
    while (pending or running) and time.monotonic() < deadline:
        while pending and len(running) < int(os.environ.get("PARALLEL", 6)):
            name, fields = pending.pop(0)
            args = [sys.executable, str(go), name, str(res), f'device="{device}"',
                    *[f"{k}={json.dumps(v)}" for k, v in fields.items()]]
            log = (res / f"{name}.log").open("w")
            running[name] = (subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT), log)
            print(time.strftime("%X"), "started", name, flush=True)
        for name, (proc, log) in list(running.items()):
            if proc.poll() is None:
                continue
            log.close()
            del running[name]
            print(time.strftime("%X"), "ended", name, proc.returncode, flush=True)
            tail = (res / f"{name}.log").read_text(errors="replace").splitlines()[-8:]
            (res / f"{name}.log.tail").write_text("\n".join(tail) + "\n")
            if proc.returncode == 0 and name.startswith("s1_"):
                bundle(out / f"weights_{name}.tar.gz", [
                    f for f in Path("/tmp/runs", name).iterdir()
                    if f.suffix in (".json", ".safetensors")])
            # $OUT brings back at most 8 files: one archive of every result, rewritten whole
            bundle(out / "results.tar.gz", sorted(res.glob("*.json")) + sorted(
                res.glob("*.log.tail")))
        time.sleep(2)
    for name, (proc, _) in running.items():
        proc.kill()
        print("cut by the deadline:", name, flush=True)
    print("not started:", [n for n, _ in pending], flush=True)


if __name__ == "__main__":
    main()
