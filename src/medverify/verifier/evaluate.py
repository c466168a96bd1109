"""Measure a verifier on pairs files: 3-way metrics, SUPPORTED-vs-rest, confusion, pairs/s."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from medverify.verifier.infer import Verifier
from medverify.verifier.metrics import classification_metrics, supported_vs_rest
from medverify.verifier.model import LABELS

EVAL_FILES = ("checkcovid_dev", "citint_dev", "healthver_dev", "expertqa_val", "covidfact_dev")


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def evaluate_rows(verifier: Verifier, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Metrics of ``verifier`` on normalized pair rows (3-way or 2-way)."""
    start = time.perf_counter()
    probs = verifier.predict([(r["claim"], r["evidence"]) for r in rows])
    seconds = time.perf_counter() - start
    pred = verifier.decide(probs)
    gold = [r["label"] for r in rows]
    out: dict[str, Any] = {
        "n": len(rows),
        "seconds": round(seconds, 1),
        "pairs_per_s": round(len(rows) / max(seconds, 1e-9), 1),
    }
    if rows and rows[0].get("labels") == "3-way":
        out["three_way"] = classification_metrics(gold, pred, LABELS)
    out["supported_vs_rest"] = supported_vs_rest(gold, pred)
    return out


def evaluate_files(verifier: Verifier, data_dir: Path, names: tuple[str, ...] = EVAL_FILES) -> dict:
    """Evaluate on each ``<name>.jsonl`` that exists under ``data_dir``."""
    results = {}
    for name in names:
        path = data_dir / f"{name}.jsonl"
        if path.is_file():
            results[name] = evaluate_rows(verifier, read_rows(path))
    return results


def summary_table(results: dict[str, Any]) -> str:
    """Markdown table of the headline numbers."""
    lines = [
        "| file | n | 3-way macro-F1 | 3-way acc | 3-way bal. acc | S-vs-rest bal. acc | pairs/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, res in results.items():
        three = res.get("three_way")
        cells = (
            [f"{three[k]:.3f}" for k in ("macro_f1", "accuracy", "balanced_accuracy")]
            if three
            else ["-"] * 3
        )
        lines.append(
            f"| {name} | {res['n']} | {' | '.join(cells)} | "
            f"{res['supported_vs_rest']['balanced_accuracy']:.3f} | {res['pairs_per_s']} |"
        )
    return "\n".join(lines)


def heldout_rows(data_dir: Path, seed: int, frac: float) -> list[dict[str, Any]]:
    """The training run's held-out validation rows (same split as training)."""
    from medverify.verifier import data as vdata

    real = [p for name in vdata.TRAIN_FILES for p in vdata.load_pairs(data_dir / f"{name}.jsonl")]
    _, val = vdata.split_holdout(real, frac, seed)
    return [
        {"claim": p.claim, "evidence": p.evidence, "label": p.label, "labels": "3-way"} for p in val
    ]
