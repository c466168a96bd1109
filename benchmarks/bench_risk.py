"""Hallucination-risk throughput: feature extraction per model size, classifier training and
scoring for 10,000 answers.

1. Feature extraction: random-weight GPT-2 and Llama models built offline at each size
   preset of ``medverify.testing.tiny_lm`` (their tokenizers differ: byte-level BPE vs
   Unigram) force-decode the answers of the MedQuAD sample shipped with medverify (the first
   three sentences of each page, with a "What is <topic>?" question) through
   ``risk.scorers.HFScorer`` (top-50, batch 8, float32 on CPU); throughput is answer tokens
   per second of the scorer alone, then of the feature computation (both models, KL across
   them, aggregation) per answer.
2. Classifier: 10,000 synthetic feature rows in the real feature schema of two scorers
   (20 % hallucinations, shifted in 10 % of the features), the stacking classifier trained
   on a stratified 80/20 split (RF, LR, XGBoost, LR meta-learner; 100 trees), then scoring
   10,000 rows with the saved model.

Random weights: the throughput is real, the features carry no signal; no AUC of a real
model is claimed. On a GPU (``--device cuda``) the scorer uses bfloat16.

    .venv/bin/python benchmarks/bench_risk.py [--sizes tiny 1m 10m 50m] [--answers 64]
        [--rows 10000] [--device cpu|cuda]

Writes benchmarks/results/risk.json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from medverify.config import RiskSettings
from medverify.judge.quotes import sentences
from medverify.risk.classifier import predict_proba
from medverify.risk.features import build_schema, extract_features
from medverify.risk.persist import load_classifier, save
from medverify.risk.records import FeatureRow
from medverify.risk.scorers import ScoreItem, make_scorer
from medverify.risk.training import train_classifier
from medverify.testing.citers import medquad_questions
from medverify.testing.tiny_lm import SIZE_PRESETS, build_tiny_lm

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def answers(n: int) -> list[ScoreItem]:
    items = []
    for question in medquad_questions(n):
        assert question.reference is not None
        text = " ".join(sentences(question.reference.text)[:3])
        items.append(ScoreItem(question=question.text, answer=text))
    return items


async def score_all(spec: str, items: list[ScoreItem], device: str) -> tuple[list[Any], float]:
    scorer = make_scorer(spec, RiskSettings(device=device))  # type: ignore[arg-type]
    await scorer.score(items[:2])  # load the model and warm up
    started = time.perf_counter()
    traces = await scorer.score(items)
    return traces, time.perf_counter() - started


def extraction(size: str, items: list[ScoreItem], root: Path, device: str) -> dict[str, Any]:
    row: dict[str, Any] = {"size": size}
    traces_by: dict[str, list[Any]] = {}
    for arch in ("gpt2", "llama"):
        path = build_tiny_lm(root / f"{arch}-{size}", arch, **SIZE_PRESETS[size])  # type: ignore[arg-type]
        meta = json.loads((path / "medverify_tiny_lm.json").read_text("utf-8"))
        traces, seconds = asyncio.run(score_all(f"hf:{path}", items, device))
        tokens = sum(len(t.steps) for t in traces)
        row[arch] = {"parameters": meta.get("parameters"), "answers": len(items),
                     "tokens": tokens, "seconds": round(seconds, 2),
                     "tokens_per_s": round(tokens / seconds, 1),
                     "errors": sum(1 for t in traces if t.error)}
        traces_by[arch] = traces
    started = time.perf_counter()
    for a, b in zip(traces_by["gpt2"], traces_by["llama"], strict=True):
        extract_features({a.scorer: [a], b.scorer: [b]}, granularity="answer")
    seconds = time.perf_counter() - started
    row["features_per_answer_ms"] = round(1000 * seconds / len(items), 2)
    return row


def classifier(n_rows: int, seed: int = 0) -> dict[str, Any]:
    schema = build_schema(["hf:/models/a", "hf:/models/b"], rephrasings=False,
                          granularity="answer")
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, len(schema.names)))
    y = (rng.random(n_rows) < 0.2).astype(int)
    shifted = rng.choice(len(schema.names), size=max(1, len(schema.names) // 10), replace=False)
    x[np.ix_(y == 1, shifted)] += 0.8
    started = time.perf_counter()
    trained = train_classifier(x, y, schema, seed=seed, data_sha256="synthetic")
    train_s = time.perf_counter() - started
    rows = [FeatureRow(unit_id=str(i), granularity="answer", text="",
                       values=dict(zip(schema.names, map(float, v), strict=True)))
            for i, v in enumerate(x)]
    with tempfile.TemporaryDirectory() as tmp:
        save(trained, tmp)
        started = time.perf_counter()
        loaded = load_classifier(tmp)
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        predict_proba(loaded, rows)
        score_s = time.perf_counter() - started
    return {"rows": n_rows, "features": len(schema.names), "train_s": round(train_s, 1),
            "load_s": round(load_s, 2), "score_s": round(score_s, 2),
            "test_auc": round(float(trained.card.metrics["roc_auc"]["HALLUCINATION"]), 3)}


def write(results: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "risk.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = ["# Hallucination-risk throughput", "",
             f"{results['machine']}; `{results['command']}`; device {results['device']}", "",
             "| size | GPT-2 params | GPT-2 tokens/s | Llama params | Llama tokens/s | "
             "features per answer (2 models + KL) |", "|---|---|---|---|---|---|"]
    for row in results["extraction"]:
        g, ll = row["gpt2"], row["llama"]
        lines.append(f"| {row['size']} | {g['parameters']:,} | {g['tokens_per_s']:,} | "
                     f"{ll['parameters']:,} | {ll['tokens_per_s']:,} | "
                     f"{row['features_per_answer_ms']} ms |")
    c = results["classifier"]
    lines += ["", f"Classifier, {c['rows']:,} synthetic rows x {c['features']} features: "
              f"training {c['train_s']} s (stratified 80/20, 5-fold stacking), loading "
              f"{c['load_s']} s, scoring {c['rows']:,} rows {c['score_s']} s; test AUC "
              f"{c['test_auc']} on the synthetic separation (not a real-data number).", ""]
    path = RESULTS / "risk.md"
    path.write_text("\n".join(lines))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny", "1m", "10m", "50m"],
                        choices=list(SIZE_PRESETS))
    parser.add_argument("--answers", type=int, default=64)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    items = answers(args.answers)
    with tempfile.TemporaryDirectory() as tmp:
        extracted = [extraction(size, items, Path(tmp), args.device) for size in args.sizes]
    results = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()}",
        "command": "python benchmarks/bench_risk.py " + " ".join(sys.argv[1:]),
        "device": args.device,
        "extraction": extracted,
        "classifier": classifier(args.rows),
    }
    print(write(results).read_text())


if __name__ == "__main__":
    main()
