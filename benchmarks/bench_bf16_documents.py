"""Documents through the bfloat16 encoder against fp32 (issue 45: "a bf16 ingest could be
much faster too: measure and report"). Not a setting: ``embed_runtime = "auto"`` runs only
queries in bfloat16; this measures what documents would gain and lose.

Check-COVID corpus documents (title + text, as ingest embeds them), cut into MiniLM's token
windows; one thread; batches of 64 windows as ingest runs them: torch fp32 (the ``torch``
runtime), ONNX Runtime fp32 (``onnx``) and :class:`medverify.kb.bf16_encoder.Bf16Encoder`,
rotated batch by batch. Wall time and the thread's CPU time (``thread_time``: less
inflated by a loaded machine), windows per CPU second, and the cosine of each window's
vector to torch fp32's.

    .venv/bin/python benchmarks/bench_bf16_documents.py [--docs 100]

Writes benchmarks/results/bf16_documents.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULTS = ROOT / "benchmarks" / "results"

from bench_query_embedding import RETRIEVAL  # noqa: E402


def documents(n: int) -> list[str]:
    lines = (RETRIEVAL / "checkcovid" / "corpus.jsonl").read_text("utf-8").splitlines()
    docs = [json.loads(line) for line in lines if line.strip()][:n]
    return [f"{d.get('title') or ''}\n{d['text']}" for d in docs]


def measure(runs: dict[str, Any], batches: list[list[list[int]]]) -> dict[str, Any]:
    wall: dict[str, float] = dict.fromkeys(runs, 0.0)
    cpu: dict[str, float] = dict.fromkeys(runs, 0.0)
    vectors: dict[str, list[np.ndarray]] = {name: [] for name in runs}
    names = list(runs)
    for i, batch in enumerate(batches):
        for name in names[i % len(names):] + names[:i % len(names)]:
            started, on_cpu = time.perf_counter(), time.thread_time()
            out = runs[name](batch)
            wall[name] += time.perf_counter() - started
            cpu[name] += time.thread_time() - on_cpu
            vectors[name].append(np.asarray(out, dtype=np.float32))
    windows = sum(len(b) for b in batches)
    reference = np.concatenate(vectors[names[0]])
    result = {}
    for name in names:
        cosine = np.sum(np.concatenate(vectors[name]) * reference, axis=1)
        result[name] = {"wall_s": round(wall[name], 2), "cpu_s": round(cpu[name], 2),
                        "windows_per_cpu_s": round(windows / cpu[name], 1),
                        "cosine_mean": round(float(cosine.mean()), 6),
                        "cosine_min": round(float(cosine.min()), 6)}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=100)
    args = parser.parse_args(argv)
    import torch

    from medverify.kb.bf16_encoder import Bf16Encoder
    from medverify.kb.embed import minilm
    from medverify.kb.sentence_embed import length_batches

    torch.set_num_threads(1)
    fp32, onnx = minilm("fp32", "cpu", "torch"), minilm("fp32", "cpu", "onnx")
    encoder = Bf16Encoder(fp32._model)
    windows = fp32.tokenizer.windows(documents(args.docs), fp32.window)[0]
    batches = [[windows[i] for i in rows]
               for rows in length_batches([len(w) for w in windows], 64)]
    runs = {"torch fp32": fp32._forward, "onnx fp32": onnx._forward, "bf16": encoder.run}
    for run in runs.values():
        run(batches[-1])  # warm
    load_before = round(os.getloadavg()[0], 2)
    out: dict[str, Any] = {
        "documents": args.docs, "windows": len(windows),
        "mean_tokens": round(float(np.mean([len(w) for w in windows])), 1),
        "load_before": load_before, "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([".venv/bin/python benchmarks/bench_bf16_documents.py",
                             *(argv if argv is not None else sys.argv[1:])]),
        "runs": measure(runs, batches)}
    out["load_after"] = round(os.getloadavg()[0], 2)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bf16_documents.json").write_text(json.dumps(out, indent=1) + "\n", "utf-8")
    (RESULTS / "bf16_documents.md").write_text(markdown(out), "utf-8")
    print(markdown(out))
    return 0


def markdown(out: dict[str, Any]) -> str:
    lines = ["# Documents through the bfloat16 encoder against fp32", "",
             f"`{out['command']}` ({out['date']}): {out['documents']} Check-COVID documents, "
             f"{out['windows']} windows (mean {out['mean_tokens']} tokens), batches of 64 "
             f"windows, one thread, runtimes rotated batch by batch; load average "
             f"{out['load_before']} before, {out['load_after']} after ({out['cpus']} CPUs, "
             "shared: compare within the run).", "",
             "| runtime | wall s | CPU s | windows per CPU second | vs torch fp32 | cosine to "
             "torch fp32: mean / min |", "|---|---|---|---|---|---|"]
    base = out["runs"]["torch fp32"]["cpu_s"]
    for name, r in out["runs"].items():
        lines.append(f"| {name} | {r['wall_s']} | {r['cpu_s']} | {r['windows_per_cpu_s']} | "
                     f"{base / r['cpu_s']:.2f}x | {r['cosine_mean']} / {r['cosine_min']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
