"""Feature-group importance of the risk classifier on three real-model data sets, and the
measured cost per answer and per token, all from stored features (no model calls).

Inputs: the work folders of ``bench_risk_real_model.py`` (MedQA-USMLE), ``bench_risk_kqa.py``
(K-QA) and ``bench_risk_pubmedqa.py`` (PubMedQA): ``features.jsonl`` (+ schema),
``examples.jsonl`` and ``timing.json``. Each data set is split by question exactly as its
benchmark splits it (``split_questions``, same seed and test share).

Groups: the per-position series of :mod:`medverify.risk.series` (``MODEL_SERIES``:
logprob, prob, rank, log_rank, top1, top5, topk_mass, entropy, entropy_lb; each gives the
12 ``STATS``) plus ``length`` (the scalars ``m0.n_tokens`` and ``unit.n_chars``), and
three families of them: ``answer-token likelihood`` (logprob, prob, rank, log_rank: how
likely the model found the tokens written), ``predictive distribution`` (top1, top5,
topk_mass, entropy, entropy_lb: how peaked the model's next-token distribution was,
whatever was written) and ``length``. Fitted: the full set, each FAMILY dropped, each
family alone and each SERIES alone (a series dropped alone is not fitted: its family
keeps near-copies of it, e.g. prob and logprob quantiles are monotone maps of each other,
and each fit costs about a minute on the loaded 2 cores). Every fit is the shipped training
(``train_classifier``, as ``medverify risk train`` calls it: same seed, inner 80/20 split,
stacking of random forest, logistic regression and XGBoost) is fitted on the train
questions and scored on the test questions: ROC AUC (HALLUCINATION positive) with a 95 %
bootstrap CI over test questions, and the AUC difference to the full set with a paired
bootstrap CI (same resamples). On the pair data sets (K-QA, PubMedQA) also the paired win
rate (counterfactual scored riskier than its original; chance 0.5).

Cost: seconds per answer from each benchmark's ``timing.json`` (the timed ``medverify risk
features`` run, model load subtracted) divided by the counted answers, answer tokens
(``m0.n_tokens``) and input tokens (prompt + answer, the model's tokenizer over
``render_prompt``): measured wall time over measured counts.

    .venv/bin/python benchmarks/bench_risk_feature_groups.py [--model DIR] \\
        [--medqa-work DIR] [--kqa-work DIR] [--pubmedqa-work DIR] [--resamples 1000] \
        [--only NAME]   # fit one data set, cached in its work folder; the rest reuse it

Writes benchmarks/results/risk_feature_groups.json and .md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_risk_pubmedqa import KQA, RM, load_features, token_cost

from medverify.risk.series import MODEL_SERIES

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
LENGTH = "length"


def feature_group(name: str) -> str:
    """``m0.logprob.q10`` -> ``logprob``; ``m0.n_tokens`` / ``unit.n_chars`` -> ``length``."""
    parts = name.split(".")
    if len(parts) == 3 and parts[1] in MODEL_SERIES:
        return parts[1]
    if name.endswith((".n_tokens", ".n_chars")):
        return LENGTH
    raise ValueError(f"feature {name!r} has no group here (one scorer, answer level)")


FAMILIES = {"answer-token likelihood": ("logprob", "prob", "rank", "log_rank"),
            "predictive distribution": ("top1", "top5", "topk_mass", "entropy", "entropy_lb"),
            LENGTH: (LENGTH,)}


def groups_of(names: list[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for j, name in enumerate(names):
        out.setdefault(feature_group(name), []).append(j)
    return out


def families_of(groups: dict[str, list[int]]) -> dict[str, list[int]]:
    fams = {f: sorted(j for g in members if g in groups for j in groups[g])
            for f, members in FAMILIES.items()}
    assert sum(map(len, fams.values())) == sum(map(len, groups.values())), "a group has no family"
    return fams


def _pairs(ids: list[str]) -> list[tuple[int, int]]:
    where = {x: i for i, x in enumerate(ids)}
    return [(where[x[: -len(":cf")] + ":fact"], i) for i, x in enumerate(ids)
            if x.endswith(":cf") and x[: -len(":cf")] + ":fact" in where]


def dataset(work: Path, *, seed: int, test_share: float, resamples: int) -> dict[str, Any]:
    from medverify.risk.classifier import feature_matrix
    from medverify.risk.records import FeatureExample
    from medverify.risk.training import train_classifier

    lines, schema = load_features(work)
    qids, test_q = RM.split_questions(lines, seed=seed, test_share=test_share)
    rows = {side: [FeatureExample.model_validate(x) for x in lines
                   if (x["provenance"]["question_id"] in test_q) == (side == "test")]
            for side in ("train", "test")}
    x = {s: feature_matrix([e.row for e in r], schema) for s, r in rows.items()}
    y = {s: np.array([e.label == "HALLUCINATION" for e in r], dtype=int) for s, r in rows.items()}
    groups_te = np.array([e.provenance["question_id"] for e in rows["test"]])
    pairs = _pairs([e.id for e in rows["test"]])
    pair_groups = np.array([groups_te[b] for _, b in pairs])
    digest = hashlib.sha256((work / "features.jsonl").read_bytes()).hexdigest()
    groups = groups_of(schema.names)
    families = families_of(groups)
    every = list(range(len(schema.names)))
    configs: list[tuple[str, str, list[int]]] = [("all", "all features", every)]
    configs += [("drop", f, [j for j in every if j not in set(cols)])
                for f, cols in families.items()]
    configs += [("alone", f, cols) for f, cols in families.items()]
    configs += [("alone", g, cols) for g, cols in groups.items() if g not in families]

    scores: dict[tuple[str, str], np.ndarray] = {}
    out: dict[str, Any] = {"work": str(work), "n_train": len(rows["train"]),
                           "n_test": len(rows["test"]), "test_questions": len(test_q),
                           "train_questions": len(qids) - len(test_q), "test_pairs": len(pairs),
                           "groups": {g: len(c) for g, c in groups.items()},
                           "families": {f: list(FAMILIES[f]) for f in families},
                           "features_sha256": digest, "configs": []}
    started = time.perf_counter()
    for kind, group, cols in configs:
        sub = schema.model_copy(update={"names": [schema.names[j] for j in cols]})
        trained = train_classifier(x["train"][:, cols], y["train"], sub, seed=seed,
                                   data_sha256=digest)
        score = trained.model.predict_proba(x["test"][:, cols])[:, 1]
        scores[(kind, group)] = score
        out["configs"].append(_measure(kind, group, cols, score, scores[("all", "all features")],
                                       y["test"], groups_te, pairs, pair_groups, seed, resamples))
        m = out["configs"][-1]
        print(f"  {kind:5} {group:12} AUC {m['roc_auc']:.3f} {m['roc_auc_ci95']} "
              f"delta {m['delta_vs_all']:+.3f} {m['delta_ci95']}"
              + (f" paired {m['paired_win_rate']:.3f}" if pairs else ""), flush=True)
    out["fit_s"] = round(time.perf_counter() - started, 1)
    return out


def _measure(kind: str, group: str, cols: list[int], score: np.ndarray, full: np.ndarray,
             y: np.ndarray, groups: np.ndarray, pairs: list[tuple[int, int]],
             pair_groups: np.ndarray, seed: int, resamples: int) -> dict[str, Any]:
    auc = RM.roc_auc(y, score)
    lo, hi = RM.cluster_bootstrap(groups, lambda r: RM.roc_auc(y[r], score[r]), n=resamples,
                                  seed=seed)
    dlo, dhi = RM.cluster_bootstrap(
        groups, lambda r: RM.roc_auc(y[r], score[r]) - RM.roc_auc(y[r], full[r]), n=resamples,
        seed=seed)
    m: dict[str, Any] = {"kind": kind, "group": group, "n_features": len(cols),
                         "roc_auc": round(auc, 4), "roc_auc_ci95": [round(lo, 4), round(hi, 4)],
                         "delta_vs_all": round(auc - RM.roc_auc(y, full), 4),
                         "delta_ci95": [round(dlo, 4), round(dhi, 4)]}
    if pairs:
        wins = KQA._paired(score, pairs, higher=True)
        wlo, whi = RM.cluster_bootstrap(pair_groups, lambda r: float(wins[r].mean()),
                                        n=resamples, seed=seed)
        m |= {"paired_win_rate": round(float(wins.mean()), 4),
              "paired_win_rate_ci95": [round(wlo, 4), round(whi, 4)]}
    return m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=Path("/tmp/gem/gemma3-270m"),
                        help="hf model directory (its tokenizer only, for tokens per answer)")
    parser.add_argument("--medqa-work", type=Path, default=Path("/tmp/bench_full"))
    parser.add_argument("--kqa-work", type=Path, default=Path("/tmp/bench_risk_kqa"))
    parser.add_argument("--pubmedqa-work", type=Path, default=Path("/tmp/bench_risk_pubmedqa"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-share", type=float, default=0.3)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--cost-only", action="store_true",
                        help="Only the cost table (no classifier fits); writes nothing.")
    parser.add_argument("--only", choices=["MedQA-USMLE", "K-QA", "PubMedQA"],
                        help="Fit this data set only and cache it in its work folder.")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    works = {"MedQA-USMLE": args.medqa_work, "K-QA": args.kqa_work,
             "PubMedQA": args.pubmedqa_work}
    report: dict[str, Any] = {
        "benchmark": "bench_risk_feature_groups", "seed": args.seed,
        "test_share": args.test_share, "model": str(args.model),
        "bootstrap": f"{args.resamples} resamples of test questions (clusters), percentile "
                     "95 % CI; deltas paired (same resamples)",
        "machine": {"cpu_cores": os.cpu_count(), "machine": platform.machine(),
                    "torch_threads": RM._torch_threads()},
        "cost": {}, "datasets": {}}
    for name, work in works.items():
        if args.only:
            break
        lines, _ = load_features(work)
        report["cost"][name] = token_cost(work, lines, tokenizer)
        print(name, report["cost"][name], flush=True)
    if args.cost_only:
        return
    for name, work in works.items():
        if args.only and name != args.only:
            continue
        cache = work / f"feature_groups_seed{args.seed}_share{args.test_share}.json"
        digest = hashlib.sha256((work / "features.jsonl").read_bytes()).hexdigest()
        found = json.loads(cache.read_text("utf-8")) if cache.is_file() else None
        if (found and found["features_sha256"] == digest
                and found["resamples"] == args.resamples):
            print(f"{name}: cached {cache}", flush=True)
        else:
            print(name, flush=True)
            found = dataset(work, seed=args.seed, test_share=args.test_share,
                            resamples=args.resamples) | {"resamples": args.resamples}
            cache.write_text(json.dumps(found, indent=2) + "\n")
        report["datasets"][name] = found
    if args.only:
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "risk_feature_groups.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "risk_feature_groups.md").write_text(markdown(report))
    print(f"wrote {RESULTS / 'risk_feature_groups.json'} and .md")


def _ci(ci: list[float]) -> str:
    return f"{ci[0]:.3f}-{ci[1]:.3f}"


def markdown(r: dict[str, Any]) -> str:
    lines = [
        "# Hallucination risk: feature groups and cost per answer (Gemma 3 270M, 2 CPU cores)",
        "",
        "`python benchmarks/bench_risk_feature_groups.py` (see its docstring): stored features "
        "of the three real-model benchmarks, each split by question as its benchmark does; "
        "the shipped training (`train_classifier`, seed "
        f"{r['seed']}) refitted with each feature family dropped and with each family and "
        "each series alone (families: "
        + "; ".join(f"{f} = {', '.join(m)}" for f, m in FAMILIES.items()) + "). "
        "Chance is AUC 0.500 and paired win rate 0.500. Delta = AUC minus the full set's "
        f"AUC on the same test questions (paired CI). CIs: {r['bootstrap']}.",
        "",
    ]
    for name, d in r["datasets"].items():
        paired = d["test_pairs"] > 0
        lines += [
            f"## {name}",
            "",
            f"{d['train_questions']} train / {d['test_questions']} test questions "
            f"({d['n_train']} / {d['n_test']} examples"
            + (f", {d['test_pairs']} test pairs" if paired else "") + f"); {d['fit_s']} s of fits.",
            "",
            "| features | n | ROC AUC | 95 % CI | delta vs all | 95 % CI |"
            + (" paired win | 95 % CI |" if paired else ""),
            "|---|---|---|---|---|---|" + ("---|---|" if paired else ""),
        ]
        for m in d["configs"]:
            label = {"all": "all", "drop": f"without {m['group']}",
                     "alone": f"{m['group']} alone"}[m["kind"]]
            lines.append(
                f"| {label} | {m['n_features']} | {m['roc_auc']:.3f} | {_ci(m['roc_auc_ci95'])} | "
                f"{m['delta_vs_all']:+.3f} | {_ci(m['delta_ci95'])} |"
                + (f" {m['paired_win_rate']:.3f} | {_ci(m['paired_win_rate_ci95'])} |"
                   if paired else ""))
        lines.append("")
    mc = r["machine"]
    lines += [
        f"## Cost of `medverify risk features` ({mc['cpu_cores']} CPU cores, torch "
        f"{mc['torch_threads']} threads, float32)",
        "",
        "Measured: the wall time of each benchmark's timed `risk features` run minus the "
        "separately timed start-up + model load, over the counted answers and tokens (input = "
        "prompt + answer, Gemma tokenizer). The runs share the machine with other jobs; their "
        "load differed, so compare the rows with care.",
        "",
        "| data set | answers | mean answer tokens | mean input tokens | s per answer | "
        "ms per answer token | ms per input token | start-up + load (s, once) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, c in r["cost"].items():
        lines.append(f"| {name} | {c['examples']} | {c['mean_answer_tokens']} | "
                     f"{c['mean_input_tokens']} | {c['s_per_answer']} | "
                     f"{c['ms_per_answer_token']} | {c['ms_per_input_token']} | "
                     f"{c['startup_and_load_s']} |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
