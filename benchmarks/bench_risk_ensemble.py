"""Hallucination risk from an ensemble of real models (issue 33, CHECK's database-free
detector): how much each packaged model adds, which feature set generalises, what each
model costs.

Data: the examples of one data set's benchmark, split by question exactly as it splits
them: ``kqa`` (``bench_risk_kqa.py``: K-QA gold statements and rule-made counterfactuals),
``medqa`` (``bench_risk_real_model.py``: MedQA-USMLE options), ``pubmedqa``
(``bench_risk_pubmedqa.py``: PubMedQA conclusions and counterfactuals).

1. **Features**: ``medverify risk features`` with every ``--scorer hf:NAME`` at once (the
   catalogue models, prepared with ``medverify models prepare NAME --dtype float32``),
   resumable; the schema holds each model's series (``m{i}.*``) and each pair's
   cross-model series (``kl``, ``dlogprob``, ``dentropy`` of ``m{i}_m{j}``).
2. **Cost**: each model alone on the first ``--cost-examples`` examples (``risk features``
   with one scorer, timed; the model load, timed apart, is subtracted): seconds per answer
   on this machine's cores, and the total.
3. **Models**: the shipped stacking classifier (``train_classifier``, its inner split by
   question) fitted on the train questions with the columns of a model subset (its
   ``m{i}`` features, the pairs within it, the length): each model alone, then models
   added in ``--scorers`` order; ROC AUC on the test questions with a 95 % cluster-bootstrap
   CI over questions, and the gain of each added model with a paired bootstrap CI.
4. **Feature set**: what ``medverify risk train`` does by default (``--feature-set auto``,
   :mod:`medverify.risk.feature_sets`): the family sets (all; answer-token likelihood;
   + cross-model; + predictive distribution) ranked by 5-fold cross-validation grouped by
   question over the TRAIN questions only; the chosen set is fitted and scored once on
   test, against all features. That classifier is saved to ``WORK/classifier``; its card
   names its columns, the candidates' CV AUCs, the data, the split, the dtype and this
   command. ``WORK/test.jsonl`` holds the test questions' rows for
   ``bench_risk_compute.py``.

    .venv/bin/python benchmarks/bench_risk_ensemble.py kqa \\
        --scorers smollm2-135m gemma3-270m qwen2.5-0.5b qwen2.5-1.5b [--questions N]

Writes benchmarks/results/risk_ensemble_<dataset>.json and .md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_risk_kqa as KQA
import bench_risk_real_model as RM

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BIN = Path(sys.executable).parent


def examples_for(dataset: str, questions: int, seed: int) -> list[dict[str, Any]]:
    """The data set's examples, built as its own benchmark builds them."""
    import random

    if dataset == "kqa":
        rows = KQA.load_kqa()
        order = list(rows)
        random.Random(seed).shuffle(order)
        chosen = order[:questions] if questions else order
        pool, _ = KQA.drug_pool(s for row in rows for s in [*row["Must_have"],
                                                            *row["Nice_to_have"]])
        return KQA.make_examples(chosen, KQA.Editor(pool, seed))
    if dataset == "medqa":
        found = RM.load_questions(RM.MEDQA)
        return RM.make_examples(random.Random(seed).sample(found, questions or 1000))
    import bench_risk_pubmedqa as PQA

    rows = PQA.load_pubmedqa()
    order = list(rows)
    random.Random(seed).shuffle(order)
    pool, _ = KQA.drug_pool(PQA.conclusion(r) for r in rows)
    return PQA.make_examples(order[:questions] if questions else order,
                             KQA.Editor(pool, seed))


def features(ex_file: Path, out: Path, scorers: list[str], config: Path | None = None) -> float:
    """Run ``risk features`` with every scorer (resumes an interrupted run); wall s."""
    cmd = [str(BIN / "medverify"), "risk", "features", str(ex_file), "--out", str(out)]
    if config is not None:
        cmd += ["--config", str(config)]
    for name in scorers:
        cmd += ["--scorer", f"hf:{name}"]
    started = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - started


def cost(work: Path, examples: list[dict[str, Any]], scorers: list[str],
         n: int, config: Path, dtype: str) -> dict[str, Any]:
    """Seconds per answer of each model alone (model load subtracted), and the total."""
    sample = work / "cost_examples.jsonl"
    sample.write_text("".join(json.dumps(e) + "\n" for e in examples[:n]), "utf-8")
    out: dict[str, Any] = {"examples": n, "per_model": {}}
    for name in scorers:
        from medverify.llm.local_models import resolve_model_dir

        load_s = RM.load_time(resolve_model_dir(name), dtype)
        target = work / f"cost_{name}.jsonl"
        target.unlink(missing_ok=True)
        wall = features(sample, target, [name], config)
        out["per_model"][name] = {"load_s": round(load_s, 1), "wall_s": round(wall, 1),
                                  "s_per_answer": round(max(wall - load_s, 0.0) / n, 4)}
    out["total_s_per_answer"] = round(sum(m["s_per_answer"]
                                          for m in out["per_model"].values()), 4)
    return out


def columns(names: list[str], models: set[int]) -> list[int]:
    """The columns of a model subset: its models' series, the pairs within it, the length."""
    from medverify.risk.feature_sets import columns as family_columns

    return family_columns(names, None, models)


def portable(schema: Any, scorers: list[str]) -> Any:
    """The schema with catalogue names as scorer ids (``hf:NAME``) where a feature file
    made before scorers were named so recorded their prepared directories instead."""
    from medverify.llm.local_models import resolve_model_dir

    names = [f"hf:{n}" for n in scorers]
    paths = [f"hf:{resolve_model_dir(n).resolve()}" for n in scorers]
    return schema.model_copy(update={"scorers": names}) if schema.scorers == paths else schema


def load_split(work: Path, seed: int, test_share: float, scorers: list[str]) -> dict[str, Any]:
    from medverify.risk.classifier import feature_matrix
    from medverify.risk.records import FeatureExample, FeatureSchema

    feats = work / "features.jsonl"
    lines = [json.loads(x) for x in feats.read_text("utf-8").splitlines() if x.strip()]
    schema = portable(FeatureSchema.model_validate_json(
        feats.with_name(feats.name + ".schema.json").read_text("utf-8")), scorers)
    _, test_q = RM.split_questions(lines, seed=seed, test_share=test_share)
    rows = {s: [FeatureExample.model_validate(x) for x in lines
                if (x["provenance"]["question_id"] in test_q) == (s == "test")]
            for s in ("train", "test")}
    return {"schema": schema, "rows": rows,
            "sha256": hashlib.sha256(feats.read_bytes()).hexdigest(),
            "x": {s: feature_matrix([e.row for e in r], schema) for s, r in rows.items()},
            "y": {s: np.array([e.label == "HALLUCINATION" for e in r], dtype=int)
                  for s, r in rows.items()},
            "groups": {s: np.array([e.provenance["question_id"] for e in r])
                       for s, r in rows.items()}}


def write_test(work: Path, data: dict[str, Any]) -> None:
    """The test questions' feature rows (and schema) as ``WORK/test.jsonl``: what
    ``bench_risk_compute.py --work WORK`` scores with ``WORK/classifier``."""
    rows = data["rows"]["test"]
    (work / "test.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows), "utf-8")
    (work / "test.jsonl.schema.json").write_text(data["schema"].model_dump_json(), "utf-8")


def fit_score(data: dict[str, Any], cols: list[int], seed: int, name: str = "models",
              selection: Any = None,
              trained_on: dict[str, Any] | None = None) -> tuple[np.ndarray, Any]:
    """Fit the stacking classifier on the train questions' ``cols`` (or ``selection``;
    its inner split by question); the test side's scores and the trained classifier."""
    from medverify.risk.feature_sets import FeatureSelection
    from medverify.risk.training import train_classifier

    names = data["schema"].names
    selection = selection or FeatureSelection(name=name, columns=[names[j] for j in cols])
    trained = train_classifier(data["x"]["train"], data["y"]["train"], data["schema"],
                               seed=seed, data_sha256=data["sha256"], selection=selection,
                               groups=list(data["groups"]["train"]), trained_on=trained_on)
    use = [names.index(c) for c in selection.columns]
    return trained.model.predict_proba(data["x"]["test"][:, use])[:, 1], trained


def auc_ci(data: dict[str, Any], score: np.ndarray, seed: int,
           base: np.ndarray | None = None) -> dict[str, Any]:
    y, groups = data["y"]["test"], data["groups"]["test"]
    lo, hi = RM.cluster_bootstrap(groups, lambda r: RM.roc_auc(y[r], score[r]), n=1000,
                                  seed=seed)
    out = {"roc_auc": round(RM.roc_auc(y, score), 4), "ci95": [round(lo, 4), round(hi, 4)]}
    if base is not None:
        dlo, dhi = RM.cluster_bootstrap(
            groups, lambda r: RM.roc_auc(y[r], score[r]) - RM.roc_auc(y[r], base[r]), n=1000,
            seed=seed)
        out |= {"gain": round(out["roc_auc"] - RM.roc_auc(y, base), 4),
                "gain_ci95": [round(dlo, 4), round(dhi, 4)]}
    return out


def model_table(data: dict[str, Any], scorers: list[str], seed: int) -> list[dict[str, Any]]:
    """Each model alone; models added in order (gain over the row before); then, against
    all models together, the best single model and each model left out (what it adds
    given the others: the AUC lost without it)."""
    names = data["schema"].names
    out, previous, alone_scores = [], None, {}
    everyone = set(range(len(scorers)))
    for i, name in enumerate(scorers):
        alone, _ = fit_score(data, columns(names, {i}), seed, f"{name} alone")
        alone_scores[name] = alone
        out.append({"models": [name], "kind": "alone", **auc_ci(data, alone, seed)})
        if i == 0:
            previous = alone
            continue
        upto, _ = fit_score(data, columns(names, set(range(i + 1))), seed,
                            f"models 1-{i + 1}")
        out.append({"models": scorers[: i + 1], "kind": f"+ {name}",
                    **auc_ci(data, upto, seed, base=previous)})
        previous = upto
        print(f"  {out[-1]['kind']}: AUC {out[-1]['roc_auc']} {out[-1]['ci95']}", flush=True)
    if len(scorers) < 2:
        return out
    best = max(alone_scores, key=lambda n: RM.roc_auc(data["y"]["test"], alone_scores[n]))
    out.append({"models": scorers, "kind": f"all vs best single ({best})",
                **auc_ci(data, previous, seed, base=alone_scores[best])})
    for i, name in enumerate(scorers):
        rest = [n for n in scorers if n != name]
        without, _ = fit_score(data, columns(names, everyone - {i}), seed, f"without {name}")
        row = auc_ci(data, previous, seed, base=without)  # gain: what `name` adds
        out.append({"models": rest, "kind": f"all - {name}", **auc_ci(data, without, seed),
                    "gain": row["gain"], "gain_ci95": row["gain_ci95"]})
        print(f"  {out[-1]['kind']}: AUC {out[-1]['roc_auc']}; {name} adds {row['gain']} "
              f"{row['gain_ci95']}", flush=True)
    return out


def choose_features(data: dict[str, Any]) -> Any:
    """``risk train``'s ``auto`` choice over the train questions only (folds grouped by
    question; :mod:`medverify.risk.feature_sets`); test is not looked at."""
    from medverify.risk.feature_sets import choose

    return choose(data["x"]["train"], data["y"]["train"], list(data["groups"]["train"]),
                  data["schema"].names)


def analyse(args: argparse.Namespace, work: Path, examples: list[dict[str, Any]],
            spent: dict[str, Any], wall: float) -> dict[str, Any]:
    """Per-model table, the feature set chosen on train, its test AUC against all
    features; saves the chosen classifier (``WORK/classifier``, and ``--ship NAME``)."""
    data = load_split(work, args.seed, args.test_share, args.scorers)
    write_test(work, data)
    result = {"dataset": args.dataset, "scorers": args.scorers, "examples": len(examples),
              "dtype": args.dtype, "features_wall_s": round(wall, 1), "cost": spent,
              "n_train": len(data["rows"]["train"]), "n_test": len(data["rows"]["test"]),
              "test_questions": len(set(data["groups"]["test"])),
              "models": model_table(data, args.scorers, args.seed)}
    picked = choose_features(data)
    full, _ = fit_score(data, columns(data["schema"].names, set(range(len(args.scorers)))),
                        args.seed, "all")
    trained_on = {"dataset": args.dataset, "examples": len(examples),
                  "train_questions": len(set(data["groups"]["train"])),
                  "split": f"by question, seed {args.seed}, test share {args.test_share}; "
                           "fitted on the train questions only",
                  "scorers": [f"hf:{n}" for n in args.scorers], "dtype": args.dtype,
                  "command": "python benchmarks/bench_risk_ensemble.py " + " ".join(sys.argv[1:])}
    chosen, trained = fit_score(data, [], args.seed, selection=picked, trained_on=trained_on)
    test = auc_ci(data, chosen, args.seed, base=full)
    result["feature_set"] = {"chosen": picked.name, "cv_auc": picked.cv_auc,
                             "folds": picked.folds, "n_features": len(picked.columns),
                             "n_all": len(data["schema"].names), "test": test}
    trained.card.trained_on["held_out_test"] = {
        "questions": result["test_questions"], "examples": result["n_test"],
        "roc_auc": test["roc_auc"], "ci95": test["ci95"]}
    save_classifier(trained, work / "classifier", args.ship)
    return result


def save_classifier(trained: Any, folder: Path, ship: str | None) -> None:
    """Save to ``folder``; ``ship``: also copy the model and card (not the plots) into the
    package's shipped classifiers under that name."""
    import shutil

    from medverify.risk.persist import CARD_FILE, MODEL_FILE, SHIPPED_DIR, save

    save(trained, folder)
    if ship:
        target = SHIPPED_DIR / ship
        target.mkdir(parents=True, exist_ok=True)
        for name in (MODEL_FILE, CARD_FILE):
            shutil.copyfile(folder / name, target / name)
        print(f"shipped as {target}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset", choices=["kqa", "medqa", "pubmedqa"])
    parser.add_argument("--scorers", nargs="+", required=True, metavar="NAME")
    parser.add_argument("--questions", type=int, default=0, help="0: the benchmark's default")
    parser.add_argument("--work", type=Path)
    parser.add_argument("--cost-examples", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="bfloat16",
                        help="the scorers' [risk] dtype (bfloat16: 1.4-2.5x faster on a CPU "
                        "with AMX, log-probs within ~0.01 nat; risk_dtype.md)")
    parser.add_argument("--test-share", type=float, default=0.3)
    parser.add_argument("--ship", metavar="NAME",
                        help="also ship the chosen classifier with medverify under NAME")
    parser.add_argument("--reuse", action="store_true",
                        help="analyse WORK's stored cost.json and features (no model runs)")
    args = parser.parse_args()
    work = args.work or Path(f"/tmp/bench_risk_ensemble_{args.dataset}")
    work.mkdir(parents=True, exist_ok=True)
    examples = examples_for(args.dataset, args.questions, args.seed)
    ex_file = work / "examples.jsonl"
    ex_file.write_text("".join(json.dumps(e) + "\n" for e in examples), "utf-8")
    print(f"{args.dataset}: {len(examples)} examples -> {ex_file}", flush=True)
    config = work / "risk.toml"
    config.write_text(f'[risk]\ndtype = "{args.dtype}"\n', "utf-8")
    if args.reuse:
        spent = json.loads((work / "cost.json").read_text("utf-8"))
        wall = spent.pop("features_wall_s")
    else:
        spent = cost(work, examples, args.scorers, args.cost_examples, config, args.dtype)
        print(f"cost: {spent}", flush=True)
        wall = features(ex_file, work / "features.jsonl", args.scorers, config)
        (work / "cost.json").write_text(json.dumps({**spent, "features_wall_s": wall}))
    result = analyse(args, work, examples, spent, wall)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"risk_ensemble_{args.dataset}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


def markdown(r: dict[str, Any]) -> str:
    cost = r["cost"]
    lines = [f"# Risk from an ensemble of real models: {r['dataset']}", "",
             f"`python benchmarks/bench_risk_ensemble.py {r['dataset']} --scorers "
             f"{' '.join(r['scorers'])}` (scorers in {r['dtype']}). {r['examples']} examples; "
             "split by question: "
             f"{r['n_train']} train / {r['n_test']} test examples ({r['test_questions']} test "
             "questions). Classifier: the shipped stacking classifier, fitted on train; ROC "
             "AUC (HALLUCINATION positive) on test with 95 % cluster-bootstrap CIs over test "
             "questions. Gains (paired bootstrap over test questions): `+ M`, over the row "
             "before; `all vs best single`, all models over the best one alone; `all - M`, "
             "what M adds to the others (all models minus this row).",
             "", "| models | row | ROC AUC | 95 % CI | gain | gain 95 % CI |",
             "|---|---|---|---|---|---|"]
    for m in r["models"]:
        gain = f"{m['gain']:+.4f} | {m['gain_ci95']}" if "gain" in m else "| "
        lines.append(f"| {', '.join(m['models'])} | {m['kind']} | {m['roc_auc']} | "
                     f"{m['ci95']} | {gain} |")
    fs = r["feature_set"]
    lines += ["", "## Feature set (chosen on train questions only)", "",
              f"`risk train --feature-set auto`: {fs['folds']}-fold cross-validation grouped "
              "by question over the train questions (standardised logistic regression), AUC "
              "per candidate: " + ", ".join(
                  f"{k} {v}" for k, v in fs["cv_auc"].items()) + f". Chosen: **{fs['chosen']}** "
              f"({fs['n_features']} of {fs['n_all']} features); with the stacking "
              "classifier on test: AUC "
              f"{fs['test']['roc_auc']} {fs['test']['ci95']}, against all features "
              f"{fs['test']['gain']:+.4f} {fs['test']['gain_ci95']}.", "",
              "## Cost on this machine", "",
              f"Each model alone on {cost['examples']} examples (`risk features`, model load "
              "subtracted); the machine's other load counts in these numbers.", "",
              "| model | load s | s per answer |", "|---|---|---|"]
    for name, m in cost["per_model"].items():
        lines.append(f"| {name} | {m['load_s']} | {m['s_per_answer']} |")
    lines += [f"| **all together** | | **{cost['total_s_per_answer']}** |", "",
              f"The ensemble's features of all {r['examples']} examples took "
              f"{r['features_wall_s']} s wall.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
