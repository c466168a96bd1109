"""Hallucination-risk signal of a real model (Gemma 3 270M base) on MedQA-USMLE.

True and false medical statements labelled without an LLM: every option of a MedQA-USMLE
question (4-option test set, ``../shared/data/raw/medqa-usmle/data/medqa/test.jsonl``) is
forced as the answer to the question: the correct option is a FACT example, the three
others HALLUCINATION, the question id is the group. The example's ``question`` is the
MedQA question and its ``text`` the option, so the scorer sees the shipped prompt
(``Question: <question>\\nAnswer:\\n<option>``) and the features cover the option's tokens.

1. A seeded subset of N questions (4N examples) -> ``examples.jsonl``.
2. ``medverify risk features examples.jsonl --scorer hf:MODEL`` (the shipped CLI, in a
   subprocess, timed; model load + start-up timed separately in another subprocess).
3. Split BY QUESTION (seeded, ``--test-share`` of the questions held out).
4. ``medverify risk train train.jsonl`` (the shipped CLI); its P(HALLUCINATION) on the
   held-out questions.
5. ROC AUC (HALLUCINATION positive) with a 95 % bootstrap CI over questions (clusters
   resampled), against two baselines on the same split: option length in characters, and
   the option's mean token log-probability (the feature ``m0.logprob.mean``); each
   baseline's direction is chosen on the training split. MedQA top-1 accuracy when the
   option with the highest P(FACT) is chosen per question, against 1/4.

    .venv/bin/python benchmarks/bench_risk_real_model.py --model DIR --questions N \\
        [--work DIR] [--features-only] [--seed 0]

Writes benchmarks/results/risk_real_model.json and .md (not with --features-only).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MEDQA = data_dir() / "raw" / "medqa-usmle" / "data" / "medqa" / "test.jsonl"
MEAN_LOGPROB = "m0.logprob.mean"
BIN = Path(sys.executable).parent


def load_questions(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    for row in rows:
        assert row["answer_idx"] in row["options"], row
    return rows


def make_examples(questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for q in questions:
        qid = f"medqa-test-{q['realidx']}" if "realidx" in q else q["id"]
        for letter, option in sorted(q["options"].items()):
            out.append({
                "id": f"{qid}:{letter}", "question": q["question"], "text": option,
                "label": "FACT" if letter == q["answer_idx"] else "HALLUCINATION",
                "provenance": {"source": "medqa-usmle", "file": "data/medqa/test.jsonl",
                               "question_id": qid, "option": letter,
                               "answer_idx": q["answer_idx"], "step": q.get("meta_info")},
            })
    return out


def run(cmd: list[str]) -> float:
    started = time.perf_counter()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run(cmd, check=True, env=env)
    return time.perf_counter() - started


def load_time(model: Path, dtype: str = "auto") -> float:
    """Start-up + model load of a fresh process (what `risk features` pays once)."""
    code = ("import time; t=time.perf_counter(); import medverify.cli; "
            "from medverify.risk.scorers import load_local_lm; from pathlib import Path; "
            f"load_local_lm(Path({str(model.resolve())!r}), 'cpu', {dtype!r}); "
            "print(time.perf_counter()-t)")
    return run([sys.executable, "-c", code])


def roc_auc(y: np.ndarray, score: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, score))


def cluster_bootstrap(groups: np.ndarray, stat: Any, n: int = 2000,
                      seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    ids = np.unique(groups)
    index = {g: np.flatnonzero(groups == g) for g in ids}
    values = []
    for _ in range(n):
        pick = rng.choice(ids, size=len(ids), replace=True)
        rows = np.concatenate([index[g] for g in pick])
        try:
            values.append(stat(rows))
        except ValueError:  # one class only in the resample
            continue
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def top1(groups: np.ndarray, y_fact: np.ndarray, p_fact: np.ndarray,
         rows: np.ndarray | None = None) -> float:
    rows = np.arange(len(groups)) if rows is None else rows
    hits, total = 0, 0
    order: dict[Any, list[int]] = {}
    for r in rows:
        order.setdefault(groups[r], []).append(r)
    for members in order.values():
        best = max(members, key=lambda r: p_fact[r])
        hits += int(y_fact[best] == 1)
        total += 1
    return hits / total


def top1_bootstrap(groups: np.ndarray, y_fact: np.ndarray, p_fact: np.ndarray,
                   n: int = 2000, seed: int = 0) -> tuple[float, float]:
    ids = np.unique(groups)
    correct = {}
    for g in ids:
        members = np.flatnonzero(groups == g)
        correct[g] = int(y_fact[members[np.argmax(p_fact[members])]] == 1)
    arr = np.array([correct[g] for g in ids])
    rng = np.random.default_rng(seed)
    means = [arr[rng.integers(0, len(arr), len(arr))].mean() for _ in range(n)]
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="hf model directory")
    parser.add_argument("--questions", type=int, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_risk_real_model"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-share", type=float, default=0.3)
    parser.add_argument("--features-only", action="store_true",
                        help="Pilot: time the features, write no results.")
    parser.add_argument("--reuse-features", action="store_true",
                        help="Analyse WORK/features.jsonl and timing.json of an earlier run "
                        "of the same arguments (no feature extraction).")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)

    questions = load_questions(MEDQA)
    rng = random.Random(args.seed)
    chosen = rng.sample(questions, args.questions)
    examples = make_examples(chosen)
    ex_file = args.work / "examples.jsonl"
    ex_file.write_text("".join(json.dumps(e) + "\n" for e in examples), "utf-8")
    print(f"{len(chosen)} questions, {len(examples)} examples -> {ex_file}", flush=True)

    feats = args.work / "features.jsonl"
    if args.reuse_features:
        timing = json.loads((args.work / "timing.json").read_text("utf-8"))
        assert timing["examples"] == len(examples), "features of other arguments"
    else:
        timing = extract(args, ex_file, feats, len(examples))
    if args.features_only:
        return
    analyse(args, questions, chosen, examples, feats, timing)


def extract(args: argparse.Namespace, ex_file: Path, feats: Path, n: int) -> dict[str, Any]:
    load_s = load_time(args.model)
    print(f"start-up + model load: {load_s:.1f} s", flush=True)
    for stale in (feats, feats.with_name(feats.name + ".partial")):
        stale.unlink(missing_ok=True)
    feat_cmd = [str(BIN / "medverify"), "risk", "features", str(ex_file), "--scorer",
                f"hf:{args.model.resolve()}", "--out", str(feats)]
    feat_s = run(feat_cmd)
    per_example = (feat_s - load_s) / n
    print(f"risk features: {feat_s:.1f} s wall, {per_example:.2f} s/example after load",
          flush=True)
    timing = {"startup_and_load_s": round(load_s, 1), "features_wall_s": round(feat_s, 1),
              "per_example_s": round(per_example, 3), "examples": n}
    (args.work / "timing.json").write_text(json.dumps(timing, indent=2))
    return timing


@dataclass
class Split:
    """A features file split by question, the classifier trained on one side and every
    scorer (classifier, length, mean log-prob; baselines oriented on train) on the other."""

    qids: list[str]
    test_q: set[str]
    train_lines: list[dict[str, Any]]
    test_lines: list[dict[str, Any]]
    clf_dir: Path
    train_s: float
    schema: Any
    failed: int
    test_rows: list[Any]
    tr: dict[str, np.ndarray]
    te: dict[str, np.ndarray]
    scores: dict[str, np.ndarray]
    orientation: dict[str, str]


def split_questions(lines: list[dict[str, Any]], *, seed: int,
                    test_share: float) -> tuple[list[str], set[str]]:
    """All question ids of the feature lines (sorted) and the seeded held-out ones."""
    qids = sorted({line["provenance"]["question_id"] for line in lines})
    return qids, set(random.Random(seed + 1).sample(qids, round(len(qids) * test_share)))


def split_and_score(work: Path, feats: Path, *, seed: int, test_share: float,
                    length_name: str) -> Split:
    """Split ``feats`` by ``provenance.question_id`` (seeded), ``medverify risk train`` on
    the train side, and score the test side with the classifier and the two baselines."""
    lines = [json.loads(x) for x in feats.read_text("utf-8").splitlines() if x.strip()]
    schema_text = (feats.with_name(feats.name + ".schema.json")).read_text("utf-8")
    qids, test_q = split_questions(lines, seed=seed, test_share=test_share)
    train_lines = [x for x in lines if x["provenance"]["question_id"] not in test_q]
    test_lines = [x for x in lines if x["provenance"]["question_id"] in test_q]
    train_file, test_file = work / "train.jsonl", work / "test.jsonl"
    for path, part in ((train_file, train_lines), (test_file, test_lines)):
        path.write_text("".join(json.dumps(x) + "\n" for x in part), "utf-8")
        path.with_name(path.name + ".schema.json").write_text(schema_text, "utf-8")
    clf_dir = work / "classifier"
    train_s = run([str(BIN / "medverify"), "risk", "train", str(train_file), "--out",
                   str(clf_dir), "--seed", str(seed)])

    from medverify.risk.classifier import predict_proba
    from medverify.risk.persist import load_classifier
    from medverify.risk.records import FeatureExample, FeatureSchema

    schema = FeatureSchema.model_validate_json(schema_text)
    loaded = load_classifier(clf_dir)
    test_rows = [FeatureExample.model_validate(x) for x in test_lines]
    train_rows = [FeatureExample.model_validate(x) for x in train_lines]
    p_hall = np.array(predict_proba(loaded, [e.row for e in test_rows], schema=schema))

    def arrays(rows: list[FeatureExample]) -> dict[str, np.ndarray]:
        return {
            "y": np.array([e.label == "HALLUCINATION" for e in rows], dtype=int),
            "group": np.array([e.provenance["question_id"] for e in rows]),
            "length": np.array([len(e.row.text) for e in rows], dtype=float),
            "logprob": np.array([np.nan if MEAN_LOGPROB in e.row.missing else
                                 e.row.values.get(MEAN_LOGPROB, np.nan) for e in rows]),
        }

    tr, te = arrays(train_rows), arrays(test_rows)
    failed = int(np.isnan(te["logprob"]).sum() + np.isnan(tr["logprob"]).sum())
    for part in (tr, te):  # failed traces (none expected): the training median
        part["logprob"] = np.where(np.isnan(part["logprob"]),
                                   np.nanmedian(tr["logprob"]), part["logprob"])
    scores: dict[str, np.ndarray] = {"stacking classifier": p_hall}
    orientation: dict[str, str] = {"stacking classifier": "P(HALLUCINATION)"}
    for name, key in ((length_name, "length"), ("mean token log-prob", "logprob")):
        sign = 1.0 if roc_auc(tr["y"], tr[key]) >= 0.5 else -1.0
        scores[name] = sign * te[key]
        orientation[name] = ("higher" if sign > 0 else "lower") + " -> hallucination (train)"
    return Split(qids, test_q, train_lines, test_lines, clf_dir, train_s, schema, failed,
                 test_rows, tr, te, scores, orientation)


def analyse(args: argparse.Namespace, questions: list[dict[str, Any]],
            chosen: list[dict[str, Any]], examples: list[dict[str, Any]], feats: Path,
            timing: dict[str, Any]) -> None:
    split = split_and_score(args.work, feats, seed=args.seed, test_share=args.test_share,
                            length_name="option length (chars)")
    qids, test_q, train_lines, test_lines = split.qids, split.test_q, split.train_lines, \
        split.test_lines
    clf_dir, train_s, schema, failed = split.clf_dir, split.train_s, split.schema, split.failed
    tr, te, scores, orientation = split.tr, split.te, split.scores, split.orientation

    # Extra row, not a baseline the brief asked for: the mean log-prob minus the mean over
    # the question's options (uses the other options, so only for multiple choice).
    for part in (tr, te):
        part["logprob_c"] = part["logprob"] - np.array(
            [part["logprob"][part["group"] == g].mean() for g in part["group"]])
    sign = 1.0 if roc_auc(tr["y"], tr["logprob_c"]) >= 0.5 else -1.0
    name = "mean token log-prob centred within question"
    scores[name] = sign * te["logprob_c"]
    orientation[name] = ("higher" if sign > 0 else "lower") + " -> hallucination (train)"

    y, groups = te["y"], te["group"]
    y_fact = 1 - y
    n_opts = len(next(iter(chosen))["options"])
    results: dict[str, Any] = {}
    for name, score in scores.items():
        auc = roc_auc(y, score)
        lo, hi = cluster_bootstrap(groups, lambda r, s=score: roc_auc(y[r], s[r]),
                                   seed=args.seed)
        acc = top1(groups, y_fact, -score)
        alo, ahi = top1_bootstrap(groups, y_fact, -score, seed=args.seed)
        results[name] = {"roc_auc": round(auc, 4), "roc_auc_ci95": [round(lo, 4), round(hi, 4)],
                         "top1_accuracy": round(acc, 4),
                         "top1_ci95": [round(alo, 4), round(ahi, 4)],
                         "direction": orientation[name]}
        print(f"{name}: AUC {auc:.3f} [{lo:.3f}, {hi:.3f}], top-1 {acc:.3f} "
              f"[{alo:.3f}, {ahi:.3f}]", flush=True)

    card = json.loads((clf_dir / "card.json").read_text("utf-8"))
    prep = args.model / "medverify_prepare.json"
    report = {
        "benchmark": "bench_risk_real_model",
        "model": {"dir": str(args.model), "prepare": json.loads(prep.read_text("utf-8"))
                  if prep.is_file() else None},
        "data": {"file": str(MEDQA.relative_to(ROOT.parent)), "questions_total":
                 len(questions), "questions_used": len(chosen), "options_per_question":
                 n_opts, "examples": len(examples), "seed": args.seed,
                 "split": "by question", "test_share": args.test_share,
                 "train_questions": len(qids) - len(test_q), "test_questions": len(test_q),
                 "train_examples": len(train_lines), "test_examples": len(test_lines),
                 "failed_mean_logprob": failed},
        "features": {"schema_version": schema.version, "n_features": len(schema.names),
                     "scorers": schema.scorers},
        "cost": {**timing, "train_s": round(train_s, 1), "cpu_cores": os.cpu_count(),
                 "machine": platform.processor() or platform.machine(),
                 "torch_threads": _torch_threads()},
        "classifier_card": {  # risk train's own inner 80/20 split of the TRAIN questions
            "n_train": card["card"]["n_train"], "n_test": card["card"]["n_test"],
            "roc_auc": card["card"]["metrics"]["roc_auc"].get("HALLUCINATION"),
            "note": "stratified by example, not by question: options of one question can "
                    "fall on both sides; the test_split numbers above are by question"},
        "test_split": results,
        "random_top1": round(1 / n_opts, 4),
        "bootstrap": "2000 resamples of test questions (clusters), percentile 95 % CI",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "risk_real_model.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "risk_real_model.md").write_text(markdown(report))
    print(f"wrote {RESULTS / 'risk_real_model.json'} and .md")


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def markdown(r: dict[str, Any]) -> str:
    d, c = r["data"], r["cost"]
    prep = (r["model"]["prepare"] or {})
    lines = [
        "# Hallucination risk with a real model: Gemma 3 270M on MedQA-USMLE",
        "",
        "`python benchmarks/bench_risk_real_model.py` (see its docstring). Scorer: "
        f"`hf:` Gemma 3 270M base from the Q4_K_M GGUF, dequantised and saved as "
        f"{prep.get('dtype', '?')} by `medverify risk models prepare`; one scorer, "
        f"{r['features']['n_features']} features (schema {r['features']['schema_version']}).",
        "",
        f"Data: {d['questions_used']} of {d['questions_total']} MedQA-USMLE test questions "
        f"(seed {d['seed']}), each of the {d['options_per_question']} options forced as the "
        "answer (correct = FACT, others = HALLUCINATION); split by question: "
        f"{d['train_questions']} train / {d['test_questions']} test questions "
        f"({d['train_examples']} / {d['test_examples']} examples). The classifier is "
        "`medverify risk train` on the train file (its own inner 80/20 split is only for "
        "its card); all numbers below are on the held-out test questions.",
        "",
        "| scorer of the test split | ROC AUC | 95 % CI | MedQA top-1 | 95 % CI |",
        "|---|---|---|---|---|",
    ]
    for name, m in r["test_split"].items():
        lines.append(f"| {name} ({m['direction']}) | {m['roc_auc']:.3f} | "
                     f"{m['roc_auc_ci95'][0]:.3f}-{m['roc_auc_ci95'][1]:.3f} | "
                     f"{m['top1_accuracy']:.3f} | {m['top1_ci95'][0]:.3f}-"
                     f"{m['top1_ci95'][1]:.3f} |")
    lines += [
        f"| random | 0.500 | | {r['random_top1']:.3f} | |",
        "",
        "Reading: " + "; ".join(
            f"{name}: AUC "
            + ("indistinguishable from chance (the CI holds 0.5)"
               if m["roc_auc_ci95"][0] <= 0.5 <= m["roc_auc_ci95"][1]
               else ("above" if m["roc_auc_ci95"][0] > 0.5 else "below") + " chance")
            for name, m in r["test_split"].items()) + ".",
        "",
        "AUC: HALLUCINATION is the positive class; CIs from "
        f"{r['bootstrap']}. Top-1: per question, the option with the highest P(FACT) "
        "(lowest score) is chosen.",
        "",
        f"Cost ({c['cpu_cores']} CPU cores, torch {c['torch_threads']} threads, float32): "
        f"start-up + model load {c['startup_and_load_s']} s (once); `risk features` "
        f"{c['features_wall_s']} s wall for {c['examples']} examples = "
        f"**{c['per_example_s']} s per example** after the load; `risk train` "
        f"{c['train_s']} s. Conversion from GGUF (`risk models prepare`, once): "
        f"{prep.get('load_s', '?')} s load/dequantise + {prep.get('save_s', '?')} s save.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
