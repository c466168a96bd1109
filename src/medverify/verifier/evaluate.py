"""Measure a verifier on pairs files: 3-way metrics, SUPPORTED-vs-rest, confusion, pairs/s.

:func:`score_rows` and :func:`score_files` give :class:`PairsFileScores` records;
:func:`evaluate_rows` and :func:`evaluate_files` give their JSON form (plain dicts, for
scripts that write them with ``json.dumps``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from medverify.verifier.infer import Verifier
from medverify.verifier.model import LABELS
from medverify.verifier.records import ClassificationMetrics, PairsFileScores

EVAL_FILES = ("checkcovid_dev", "citint_dev", "healthver_dev", "expertqa_val", "covidfact_dev")


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def score_rows(verifier: Verifier, rows: list[dict[str, Any]]) -> PairsFileScores:
    """Metrics of ``verifier`` on normalized pair rows (3-way or 2-way)."""
    start = time.perf_counter()
    probs = verifier.predict([(r["claim"], r["evidence"]) for r in rows])
    seconds = time.perf_counter() - start
    pred = verifier.label_pairs(probs)
    gold = [r["label"] for r in rows]
    three_way = None
    if rows and rows[0].get("labels") == "3-way":
        three_way = ClassificationMetrics.measure(gold, pred, LABELS)
    return PairsFileScores(
        n=len(rows),
        seconds=round(seconds, 1),
        pairs_per_s=round(len(rows) / max(seconds, 1e-9), 1),
        three_way=three_way,
        supported_vs_rest=ClassificationMetrics.measure_supported_vs_rest(gold, pred),
    )


def score_files(
    verifier: Verifier, data_dir: Path, names: tuple[str, ...] = EVAL_FILES
) -> dict[str, PairsFileScores]:
    """Score each ``<name>.jsonl`` that exists under ``data_dir``."""
    results = {}
    for name in names:
        path = data_dir / f"{name}.jsonl"
        if path.is_file():
            results[name] = score_rows(verifier, read_rows(path))
    return results


def evaluate_rows(verifier: Verifier, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`score_rows` as JSON-ready values."""
    return score_rows(verifier, rows).model_dump()


def evaluate_files(
    verifier: Verifier, data_dir: Path, names: tuple[str, ...] = EVAL_FILES
) -> dict[str, dict[str, Any]]:
    """:func:`score_files` as JSON-ready values."""
    return {name: s.model_dump() for name, s in score_files(verifier, data_dir, names).items()}


def summary_table(results: Mapping[str, PairsFileScores | Mapping[str, Any]]) -> str:
    """Markdown table of the headline numbers (of records, or of their JSON form as
    :func:`evaluate_files` gives it and evaluation files hold it)."""
    lines = [
        "| file | n | 3-way macro-F1 | 3-way acc | 3-way bal. acc | S-vs-rest bal. acc | pairs/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, entry in results.items():
        res = PairsFileScores.model_validate(entry)
        three = res.three_way
        cells = (
            [f"{v:.3f}" for v in (three.macro_f1, three.accuracy, three.balanced_accuracy)]
            if three
            else ["-"] * 3
        )
        lines.append(
            f"| {name} | {res.n} | {' | '.join(cells)} | "
            f"{res.supported_vs_rest.balanced_accuracy:.3f} | {res.pairs_per_s} |"
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
