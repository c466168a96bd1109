"""Hallucination-risk signal of a real model on K-QA gold statements vs rule-made counterfactuals.

Data without an LLM: K-QA (``../shared/data/raw/k-qa/questions_w_answers.jsonl``, 201 real
patient questions with physician answers) lists per question gold statements ("Must_have"
and "Nice_to_have"). Each gold statement is a FACT example (``question`` = the patient
question, ``text`` = the statement). Where one of the rule-based contradiction edits of our
NLI corpus builder (``medverify.verifier.corpus``: ``EDITS`` = negation, number, unit,
dose_frequency, population, direction, temporal_causal, quantifier; plus a drug swap with
the MedQuAD drug lexicon, as ``build_corpus`` does) changes the statement, ONE edited copy
is a HALLUCINATION example (the edit type is recorded). Among the edits that apply, the
type used least so far is taken (ties: seeded), so the types stay balanced. Group = the
K-QA question.

1. Examples of the first N questions of a seeded order -> ``examples.jsonl``.
2. ``medverify risk features`` with the scorer (shipped CLI, subprocess, timed; the
   helpers of ``bench_risk_real_model.py`` are imported from its file).
3. Split BY QUESTION (seeded, ``--test-share`` held out); ``medverify risk train`` on train.
4. On test: ROC AUC (HALLUCINATION positive) with a 95 % bootstrap CI over questions, vs
   text length and mean token log-prob (``m0.logprob.mean``; directions from train).
   Paired view: for each (statement, counterfactual) pair in test, the share where the
   counterfactual gets the higher P(HALLUCINATION) (chance 0.5; ties count 0.5), and the
   share where it gets the lower mean log-prob; CIs over questions. AUC and paired share
   per edit type with >= 30 test pairs.

    .venv/bin/python benchmarks/bench_risk_kqa.py --model DIR [--questions N] \\
        [--work DIR] [--seed 0] [--count-only] [--features-only] [--reuse-features]

Writes benchmarks/results/risk_kqa.json and .md (not with --count-only/--features-only).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from medverify.files import data_dir
from medverify.verifier.corpus import EDITS, load_medquad, normalize
from medverify.verifier.corpus.entities import _Matcher
from medverify.verifier.corpus.text import _keep_case

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
KQA = data_dir() / "raw" / "k-qa" / "questions_w_answers.jsonl"
MEDQUAD = data_dir() / "raw" / "medquad"
MEAN_LOGPROB = "m0.logprob.mean"
BIN = Path(sys.executable).parent
MIN_TYPE_PAIRS = 30


def _real_model_module() -> Any:
    path = Path(__file__).resolve().parent / "bench_risk_real_model.py"
    spec = importlib.util.spec_from_file_location("bench_risk_real_model", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves names through sys.modules
    spec.loader.exec_module(module)
    return module


RM = _real_model_module()


def load_kqa(path: Path = KQA) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    for i, row in enumerate(rows):
        row["qid"] = f"kqa-{i}"
    return rows


class Editor:
    """One counterfactual per statement from the corpus builder's contradiction edits."""

    def __init__(self, drug_pool: list[str], seed: int) -> None:
        self.matcher = _Matcher(drug_pool)
        self.pool = drug_pool
        self.seed = seed
        self.used: Counter[str] = Counter()

    def drug_swap(self, text: str, rng: random.Random) -> str | None:
        found = self.matcher.find(text)
        if not found or not self.pool:
            return None
        start, end, _ = rng.choice(found)
        old = normalize(text[start:end])
        probe = text.lower()
        for _ in range(8):  # as entities.swapped_claim: another name, not already in the text
            new = rng.choice(self.pool)
            if normalize(new) != old and new not in probe:
                return text[:start] + _keep_case(text[start:end], new) + text[end:]
        return None

    def edit(self, key: str, text: str) -> tuple[str, str] | None:
        options = {}
        for kind, fn in [*EDITS.items(), ("drug_swap", self.drug_swap)]:
            changed = fn(text, random.Random(f"{self.seed}:{kind}:{key}"))
            if changed and normalize(changed) != normalize(text):
                options[kind] = changed
        if not options:
            return None
        least = min(self.used[k] for k in options)
        kinds = sorted(k for k in options if self.used[k] == least)
        kind = random.Random(f"{self.seed}:pick:{key}").choice(kinds)
        self.used[kind] += 1
        return kind, options[kind]


def drug_pool(texts: Iterable[str]) -> tuple[list[str], int]:
    """MedQuAD drug lexicon names that occur in ``texts`` (the swap pool) and the lexicon
    size."""
    _, lex = load_medquad(MEDQUAD)
    matcher = _Matcher(lex.drugs)
    seen: dict[str, None] = {}
    for s in texts:
        for _, _, name in matcher.find(s):
            seen[name] = None
    return sorted(seen), len(lex.drugs)


def make_examples(rows: list[dict[str, Any]], editor: Editor) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        qid = row["qid"]
        for kind, field in (("must", "Must_have"), ("nice", "Nice_to_have")):
            for j, statement in enumerate(row[field]):
                statement = " ".join(statement.split())
                if not statement:
                    continue
                pair = f"{qid}:{kind}{j}"
                prov = {
                    "source": "k-qa",
                    "file": "questions_w_answers.jsonl",
                    "question_id": qid,
                    "pair_id": pair,
                    "statement_kind": field,
                }
                out.append(
                    {
                        "id": f"{pair}:fact",
                        "question": row["Question"],
                        "text": statement,
                        "label": "FACT",
                        "provenance": {**prov, "edit_type": None},
                    }
                )
                made = editor.edit(pair, statement)
                if made:
                    edit_type, changed = made
                    out.append(
                        {
                            "id": f"{pair}:cf",
                            "question": row["Question"],
                            "text": changed,
                            "label": "HALLUCINATION",
                            "provenance": {**prov, "edit_type": edit_type},
                        }
                    )
    return out


def parse_args(description: str, total: int, work: str) -> argparse.Namespace:
    """The options of the statement-vs-counterfactual benchmarks (K-QA, PubMedQA); makes
    the work folder."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", type=Path, required=True, help="hf model directory")
    parser.add_argument("--questions", type=int, default=0, help=f"0 = all {total}")
    parser.add_argument("--work", type=Path, default=Path(work))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-share", type=float, default=0.3)
    parser.add_argument("--count-only", action="store_true",
                        help="Build and count the examples, no model.")
    parser.add_argument("--features-only", action="store_true",
                        help="Pilot: time the features, write no results.")
    parser.add_argument("--reuse-features", action="store_true",
                        help="Analyse WORK/features.jsonl and timing.json of an earlier run.")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    return args


def main() -> None:
    args = parse_args(__doc__.split("\n")[0], 201, "/tmp/bench_risk_kqa")

    rows = load_kqa()
    order = list(rows)
    random.Random(args.seed).shuffle(order)
    chosen = order[: args.questions] if args.questions else order
    pool, lexicon_size = drug_pool(s for row in rows
                                   for s in [*row["Must_have"], *row["Nice_to_have"]])
    editor = Editor(pool, args.seed)
    examples = make_examples(chosen, editor)
    found = features_for(args, examples, f"{len(chosen)} questions", len(pool), show=60)
    if found is None:
        return
    feats, timing, counts = found
    data = {
        "questions_total": len(rows),
        "questions_used": len(chosen),
        "examples": len(examples),
        "by_type": dict(sorted(counts.items())),
        "drug_pool": len(pool),
        "drug_lexicon": lexicon_size,
    }
    analyse(args, data, feats, timing)


def features_for(args: argparse.Namespace, examples: list[dict[str, Any]], what: str,
                 pool: int, show: int) -> tuple[Path, dict[str, Any], Counter[str]] | None:
    """Write the examples to WORK, then their features (or reuse the stored ones); None
    when ``--count-only`` or ``--features-only`` stops the run there. Returns the features
    file, the timing and the examples' count per edit type."""
    ex_file = args.work / "examples.jsonl"
    ex_file.write_text("".join(json.dumps(e) + "\n" for e in examples), "utf-8")
    counts = Counter(e["provenance"]["edit_type"] or "FACT" for e in examples)
    print(f"{what}, {len(examples)} examples -> {ex_file}; {dict(counts)}; drug pool {pool}",
          flush=True)
    if args.count_only:
        for e in examples[:show]:
            print(e["label"], e["provenance"]["edit_type"], "|", e["text"])
        return None
    feats = args.work / "features.jsonl"
    if args.reuse_features:
        timing = json.loads((args.work / "timing.json").read_text("utf-8"))
        assert timing["examples"] == len(examples), "features of other arguments"
    else:
        timing = RM.extract(args, ex_file, feats, len(examples))
    return None if args.features_only else (feats, timing, counts)


def _paired(score: np.ndarray, pairs: list[tuple[int, int]], higher: bool) -> np.ndarray:
    """1 where the counterfactual scores higher (``higher``) or lower, 0.5 on ties."""
    f = np.array([score[a] for a, _ in pairs])
    c = np.array([score[b] for _, b in pairs])
    win = (c > f) if higher else (c < f)
    return np.where(c == f, 0.5, win.astype(float))


def _ci_text(lo: float, hi: float) -> str:
    return "holds 0.5" if lo <= 0.5 <= hi else ("above 0.5" if lo > 0.5 else "below 0.5")


def analyse(
    args: argparse.Namespace, data: dict[str, Any], feats: Path, timing: dict[str, Any], *,
    bench: str = "bench_risk_kqa", out: str = "risk_kqa", data_file: Path = KQA,
    render: Callable[[dict[str, Any]], str] | None = None,
) -> dict[str, Any]:
    """Split, train, score (see the module doc) and write ``RESULTS/<out>.json`` and
    ``.md`` (``render``, default :func:`markdown`); returns the report. Reused by the
    PubMedQA benchmark, whose examples have the same pair layout."""
    split = RM.split_and_score(args.work, feats, seed=args.seed, test_share=args.test_share,
                               length_name="text length (chars)")
    y, groups = split.te["y"], split.te["group"]
    pairs, pair_types, pair_groups = _test_pairs(split.test_rows)
    paired = Paired(pairs, pair_types, np.array(pair_types), np.array(pair_groups),
                    np.array(sorted({i for p in pairs for i in p})))
    results = {name: _scored(name, score, y, groups, paired, split.orientation[name],
                             args.seed)
               for name, score in split.scores.items()}
    lp_fixed = _logprob_fixed(split.te, paired, args.seed)
    report = _report(args, data, split, timing, bench=bench, data_file=data_file,
                     paired=paired, results=results, lp_fixed=lp_fixed)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{out}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{out}.md").write_text((render or markdown)(report))
    print(f"wrote {RESULTS / out}.json and .md")
    return report


class Paired(NamedTuple):
    """The test split's (fact, counterfactual) row pairs, by edit type and question."""

    pairs: list[tuple[int, int]]
    types: list[str]
    types_a: np.ndarray
    groups_a: np.ndarray
    rows: np.ndarray  # the rows in some pair


def _test_pairs(test_rows: list[Any]) -> tuple[list[tuple[int, int]], list[str], list[str]]:
    """Each counterfactual's row with its statement's, its edit type and question."""
    where = {e.id: i for i, e in enumerate(test_rows)}
    pairs, pair_types, pair_groups = [], [], []
    for e in test_rows:
        if e.label == "HALLUCINATION":
            fact = where.get(e.id[: -len(":cf")] + ":fact")
            if fact is not None:
                pairs.append((fact, where[e.id]))
                pair_types.append(e.provenance["edit_type"])
                pair_groups.append(e.provenance["question_id"])
    return pairs, pair_types, pair_groups


def _scored(name: str, score: np.ndarray, y: np.ndarray, groups: np.ndarray, paired: Paired,
            direction: Any, seed: int) -> dict[str, Any]:
    """One scorer on test: ROC AUC (all rows, paired rows), paired win rate, per edit type,
    with cluster-bootstrap intervals; printed as it goes."""
    pairs, pair_types, pair_types_a = paired.pairs, paired.types, paired.types_a
    pair_groups_a, paired_rows = paired.groups_a, paired.rows
    auc = RM.roc_auc(y, score)
    lo, hi = RM.cluster_bootstrap(
        groups, lambda r, s=score: RM.roc_auc(y[r], s[r]), seed=seed
    )
    auc_p = RM.roc_auc(y[paired_rows], score[paired_rows])
    plo, phi = RM.cluster_bootstrap(
        groups[paired_rows],
        lambda r, s=score[paired_rows], yy=y[paired_rows]: RM.roc_auc(yy[r], s[r]),
        seed=seed,
    )
    # paired: the classifier and the oriented baselines, "higher = hallucination"
    wins = _paired(score, pairs, higher=True)
    wlo, whi = RM.cluster_bootstrap(
        pair_groups_a, lambda r, w=wins: float(w[r].mean()), seed=seed
    )
    per_type = {}
    for t in sorted(set(pair_types)):
        sel = np.flatnonzero(pair_types_a == t)
        if len(sel) < MIN_TYPE_PAIRS:
            continue
        rows_t = np.array(sorted({i for k in sel for i in pairs[k]}))
        tlo, thi = RM.cluster_bootstrap(
            groups[rows_t],
            lambda r, s=score[rows_t], yy=y[rows_t]: RM.roc_auc(yy[r], s[r]),
            seed=seed,
        )
        per_type[t] = {
            "pairs": len(sel),
            "roc_auc": round(RM.roc_auc(y[rows_t], score[rows_t]), 4),
            "roc_auc_ci95": [round(tlo, 4), round(thi, 4)],
            "paired_win_rate": round(float(wins[sel].mean()), 4),
        }
    result = {
        "direction": direction,
        "roc_auc": round(auc, 4),
        "roc_auc_ci95": [round(lo, 4), round(hi, 4)],
        "roc_auc_paired_only": round(auc_p, 4),
        "roc_auc_paired_only_ci95": [round(plo, 4), round(phi, 4)],
        "paired_win_rate": round(float(wins.mean()), 4),
        "paired_win_rate_ci95": [round(wlo, 4), round(whi, 4)],
        "per_edit_type": per_type,
    }
    print(
        f"{name}: AUC {auc:.3f} [{lo:.3f}, {hi:.3f}]; paired-only AUC {auc_p:.3f}; "
        f"paired win {wins.mean():.3f} [{wlo:.3f}, {whi:.3f}]",
        flush=True,
    )
    for t, m in per_type.items():
        print(f"   {t}: n={m['pairs']} AUC {m['roc_auc']:.3f} win {m['paired_win_rate']:.3f}")
    return result


def _logprob_fixed(te: dict[str, Any], paired: Paired, seed: int) -> dict[str, Any]:
    """The brief's fixed-direction log-prob view: the counterfactual gets the LOWER mean
    token log-prob."""
    pairs, pair_types, pair_types_a = paired.pairs, paired.types, paired.types_a
    pair_groups_a = paired.groups_a
    lp_wins = _paired(te["logprob"], pairs, higher=False)
    llo, lhi = RM.cluster_bootstrap(
        pair_groups_a, lambda r: float(lp_wins[r].mean()), seed=seed
    )
    lp_fixed = {
        "paired_win_rate": round(float(lp_wins.mean()), 4),
        "paired_win_rate_ci95": [round(llo, 4), round(lhi, 4)],
        "per_edit_type": {
            t: round(float(lp_wins[pair_types_a == t].mean()), 4)
            for t in sorted(set(pair_types))
            if (pair_types_a == t).sum() >= MIN_TYPE_PAIRS
        },
    }
    print(f"log-prob lower for counterfactual: {lp_wins.mean():.3f} [{llo:.3f}, {lhi:.3f}]")
    return lp_fixed


def _report(args: argparse.Namespace, data: dict[str, Any], split: Any,
            timing: dict[str, Any], *, bench: str, data_file: Path, paired: Paired,
            results: dict[str, Any], lp_fixed: dict[str, Any]) -> dict[str, Any]:
    """The report: model, data and split, features, cost, the classifier's card, results."""
    qids, test_q, train_lines, test_lines = (split.qids, split.test_q, split.train_lines,
                                             split.test_lines)
    clf_dir, train_s, schema, failed = split.clf_dir, split.train_s, split.schema, split.failed
    y, pairs, pair_types = split.te["y"], paired.pairs, paired.types
    edit_type = [e.provenance.get("edit_type") for e in split.test_rows]
    card = json.loads((clf_dir / "card.json").read_text("utf-8"))
    prep = args.model / "medverify_prepare.json"
    return {
        "benchmark": bench,
        "model": {
            "dir": str(args.model),
            "prepare": json.loads(prep.read_text("utf-8")) if prep.is_file() else None,
        },
        "data": {
            "file": str(data_file.relative_to(ROOT.parent)),
            **data,
            "seed": args.seed,
            "split": "by question",
            "test_share": args.test_share,
            "train_questions": len(qids) - len(test_q),
            "test_questions": len(test_q),
            "train_examples": len(train_lines),
            "test_examples": len(test_lines),
            "test_facts": int((y == 0).sum()),
            "test_counterfactuals": int(y.sum()),
            "test_pairs": len(pairs),
            "test_pairs_by_type": dict(sorted(Counter(pair_types).items())),
            "test_examples_by_type": dict(sorted(Counter(t or "FACT" for t in edit_type).items())),
            "failed_mean_logprob": failed,
        },
        "features": {
            "schema_version": schema.version,
            "n_features": len(schema.names),
            "scorers": schema.scorers,
        },
        "cost": {
            **timing,
            "train_s": round(train_s, 1),
            "cpu_cores": os.cpu_count(),
            "machine": platform.processor() or platform.machine(),
            "torch_threads": RM._torch_threads(),
        },
        "classifier_card": {
            "n_train": card["card"]["n_train"],
            "n_test": card["card"]["n_test"],
            "roc_auc": card["card"]["metrics"]["roc_auc"].get("HALLUCINATION"),
            "note": "risk train's own inner split of the TRAIN file, by example (a "
            "statement and its counterfactual can fall on both sides)",
        },
        "test_split": results,
        "logprob_lower_for_counterfactual": lp_fixed,
        "bootstrap": "2000 resamples of test questions (clusters), percentile 95 % CI",
    }


def markdown(r: dict[str, Any]) -> str:
    d = r["data"]
    lines = [
        "# Hallucination risk with a real model: Gemma 3 270M on K-QA counterfactuals",
        "",
        "`python benchmarks/bench_risk_kqa.py` (see its docstring). Scorer: `hf:` Gemma 3 "
        "270M **base** model (a small, not instruction-tuned model), float32, one scorer, "
        f"{r['features']['n_features']} features (schema {r['features']['schema_version']}).",
        "",
        f"Data: {d['questions_used']} of {d['questions_total']} K-QA questions; each gold "
        "statement (Must_have and "
        "Nice_to_have) is a FACT, and where a rule of the NLI corpus builder applies, one "
        "edited copy is a HALLUCINATION (rule-made counterfactual; edit types: "
        + ", ".join(f"{k} {v}" for k, v in d["by_type"].items() if k != "FACT")
        + f"; {d['by_type'].get('FACT', 0)} facts). Drug swaps draw from the "
        f"{d['drug_pool']} MedQuAD-lexicon drug names that occur in K-QA statements. Split "
        f"by question: {d['train_questions']} train / {d['test_questions']} test questions "
        f"({d['train_examples']} / {d['test_examples']} examples; test: {d['test_facts']} "
        f"facts, {d['test_counterfactuals']} counterfactuals, {d['test_pairs']} pairs). "
        "Classifier: `medverify risk train` on the train file; all numbers on test.",
        "",
    ]
    return "\n".join(lines + body(r))


def body(r: dict[str, Any]) -> list[str]:
    """The tables, reading, caveats and cost of a paired report (K-QA, PubMedQA)."""
    c, res = r["cost"], r["test_split"]
    lp = r["logprob_lower_for_counterfactual"]
    lines = [
        "| scorer (test) | ROC AUC | 95 % CI | AUC, paired rows only | paired: CF scored "
        "more hallucinated | 95 % CI |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in res.items():
        lines.append(
            f"| {name} ({m['direction']}) | {m['roc_auc']:.3f} | {m['roc_auc_ci95'][0]:.3f}-"
            f"{m['roc_auc_ci95'][1]:.3f} | {m['roc_auc_paired_only']:.3f} | "
            f"{m['paired_win_rate']:.3f} | {m['paired_win_rate_ci95'][0]:.3f}-"
            f"{m['paired_win_rate_ci95'][1]:.3f} |"
        )
    lines += [
        "| random | 0.500 | | 0.500 | 0.500 | |",
        "",
        "Paired, fixed direction: the counterfactual has the lower mean token log-prob in "
        f"**{lp['paired_win_rate']:.3f}** of test pairs (95 % CI "
        f"{lp['paired_win_rate_ci95'][0]:.3f}-{lp['paired_win_rate_ci95'][1]:.3f}; chance "
        "0.5).",
        "",
        "Reading: "
        + "; ".join(
            f"{name}: AUC CI {_ci_text(*m['roc_auc_ci95'])}, paired CI "
            f"{_ci_text(*m['paired_win_rate_ci95'])}"
            for name, m in res.items()
        )
        + ".",
        "",
        "Classifier vs its own raw feature: stacking classifier AUC "
        f"{res['stacking classifier']['roc_auc']:.3f}, paired "
        f"{res['stacking classifier']['paired_win_rate']:.3f}; mean token log-prob alone AUC "
        f"{res['mean token log-prob']['roc_auc']:.3f}, paired "
        f"{res['mean token log-prob']['paired_win_rate']:.3f}. The unpaired AUC stays modest "
        "because statements differ far more in log-prob from one another than an edit "
        "changes one; comparing a statement with its own edit removes that. "
        f"(`risk train`'s own card reports AUC {r['classifier_card']['roc_auc']:.3f} on an "
        "inner split by example, where a statement and its counterfactual can fall on both "
        "sides; the numbers here are split by question.)",
        "",
        f"Per edit type (types with >= {MIN_TYPE_PAIRS} test pairs; AUC over those pairs' "
        "facts and counterfactuals / paired win rate):",
        "",
        *_per_type_table(res, lp),
        "",
        "Caveats: the counterfactuals are rule edits, not model errors; some are awkward "
        '("is not only safe") or not clearly false (a quantifier or direction flip can '
        'leave a true statement), and negation ("not") and drug swaps change the text '
        "in easy-to-spot ways. A statement and its counterfactual share the question and "
        "almost all tokens, so the paired view isolates the edit. Statements where no rule "
        "applies give FACT examples only. The model is a 270M base model; a larger or "
        "instruction-tuned model may behave differently.",
        "",
        "AUC: HALLUCINATION positive; CIs from "
        f"{r['bootstrap']}. Paired win: share of (statement, counterfactual) pairs where the "
        "counterfactual's score is higher (ties 0.5); baselines in their train direction.",
        "",
        f"Cost ({c['cpu_cores']} CPU cores, torch {c['torch_threads']} threads): start-up + "
        f"model load {c['startup_and_load_s']} s; `risk features` {c['features_wall_s']} s "
        f"wall for {c['examples']} examples = **{c['per_example_s']} s per example** after "
        f"the load; `risk train` {c['train_s']} s.",
        "",
    ]
    return lines


def _per_type_table(res: dict[str, Any], lp: dict[str, Any]) -> list[str]:
    """The per edit type table (AUC / paired win rate of each scorer), or a sentence when no
    edit type has enough test pairs."""
    first = next(iter(res.values()))["per_edit_type"]
    if not first:  # no header and separator for an empty table: a sentence
        return ["(no edit type has that many test pairs here)"]
    lines = ["| edit type | test pairs | " + " | ".join(res) + " | log-prob lower for CF |",
             "|---|---|" + "---|" * (len(res) + 1)]
    for t, m in first.items():
        cells = [
            f"{res[n]['per_edit_type'][t]['roc_auc']:.3f} / "
            f"{res[n]['per_edit_type'][t]['paired_win_rate']:.3f}"
            for n in res
        ]
        lines.append(
            f"| {t} | {m['pairs']} | " + " | ".join(cells) + f" | {lp['per_edit_type'][t]:.3f} |"
        )
    return lines


if __name__ == "__main__":
    main()
