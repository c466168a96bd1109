"""Hallucination-risk signal of a real model on PubMedQA conclusions vs rule-flipped ones.

Data without an LLM: the expert-labelled PubMedQA set that ``../shared/data`` holds
(``raw/pubmedqa/pqal_dev500.json``, 500 PubMed questions; the PQA-L test split is kept out
of that folder). Each question's ``LONG_ANSWER`` (the abstract's conclusion, written by
its authors) is a FACT example (``question`` = the PubMedQA question, ``text`` = the
conclusion; the abstract itself is not shown to the model). Where one of the rule-based
contradiction edits of our NLI corpus builder changes the conclusion (negation, number,
unit, dose_frequency, population, direction, temporal_causal, quantifier, drug swap), ONE
edited copy is a HALLUCINATION example: the K-QA benchmark's ``Editor`` (least-used edit
type first, ties seeded), its drug pool = MedQuAD-lexicon drug names that occur in the
conclusions. Group = the PubMedQA question (one pair per question).

1. Examples of the first N questions of a seeded order -> ``examples.jsonl``.
2. ``medverify risk features`` (shipped CLI, subprocess, timed, as in
   ``bench_risk_real_model.py``); ``WORK/features.jsonl`` + ``timing.json`` are kept, so
   ``--reuse-features`` recomputes the report without the model.
3. Split BY QUESTION, ``medverify risk train`` on train, and the K-QA benchmark's analysis
   on test (``bench_risk_kqa.analyse``): ROC AUC (HALLUCINATION positive) with 95 %
   bootstrap CIs over questions vs answer length and mean token log-prob (directions from
   train), paired win rate (flipped conclusion scored riskier than its original; chance
   0.5), per edit type with >= 30 test pairs.

    .venv/bin/python benchmarks/bench_risk_pubmedqa.py --model DIR [--questions N] \\
        [--work DIR] [--seed 0] [--count-only] [--features-only] [--reuse-features]

Writes benchmarks/results/risk_pubmedqa.json and .md (not with --count-only/--features-only).
Cite: Jin et al., PubMedQA: A Dataset for Biomedical Research Question Answering, EMNLP 2019.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[1]
PUBMEDQA = data_dir() / "raw" / "pubmedqa" / "pqal_dev500.json"


def _bench_module(name: str) -> Any:
    path = Path(__file__).resolve().parent / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve names through sys.modules
    spec.loader.exec_module(module)
    return module


KQA = _bench_module("bench_risk_kqa")
RM = KQA.RM


def load_pubmedqa(path: Path = PUBMEDQA) -> list[dict[str, Any]]:
    data = json.loads(path.read_text("utf-8"))
    return [{"qid": f"pubmedqa-{pmid}", **row} for pmid, row in sorted(data.items())]


def conclusion(row: dict[str, Any]) -> str:
    return " ".join(row["LONG_ANSWER"].split())


def make_examples(rows: list[dict[str, Any]], editor: Any) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        qid, text = row["qid"], conclusion(row)
        prov = {"source": "pubmedqa", "file": "pqal_dev500.json", "question_id": qid,
                "pair_id": qid, "final_decision": row["final_decision"]}
        out.append({"id": f"{qid}:fact", "question": row["QUESTION"], "text": text,
                    "label": "FACT", "provenance": {**prov, "edit_type": None}})
        made = editor.edit(qid, text)
        if made:
            out.append({"id": f"{qid}:cf", "question": row["QUESTION"], "text": made[1],
                        "label": "HALLUCINATION", "provenance": {**prov, "edit_type": made[0]}})
    return out


def load_features(work: Path) -> tuple[list[dict[str, Any]], Any]:
    from medverify.risk.records import FeatureSchema

    feats = work / "features.jsonl"
    lines = [json.loads(x) for x in feats.read_text("utf-8").splitlines() if x.strip()]
    schema = FeatureSchema.model_validate_json(
        feats.with_name(feats.name + ".schema.json").read_text("utf-8"))
    return lines, schema


def token_cost(work: Path, lines: list[dict[str, Any]], tokenizer: Any) -> dict[str, Any]:
    """Measured seconds per answer / answer token / input token of the timed run."""
    from medverify.risk.scorers import ScoreItem, render_prompt

    timing = json.loads((work / "timing.json").read_text("utf-8"))
    assert timing["examples"] == len(lines), f"{work}: timing of another run"
    answer_tokens = int(sum(x["row"]["values"]["m0.n_tokens"] for x in lines))
    examples = [json.loads(x) for x in (work / "examples.jsonl").read_text("utf-8").splitlines()
                if x.strip()]
    assert len(examples) == len(lines), f"{work}: examples of another run"
    prompt_tokens = sum(
        len(tokenizer(render_prompt(ScoreItem(question=e.get("question"), answer=e["text"])),
                      add_special_tokens=True)["input_ids"]) for e in examples)
    run_s = timing["features_wall_s"] - timing["startup_and_load_s"]
    return {**timing, "answer_tokens": answer_tokens, "prompt_tokens": prompt_tokens,
            "input_tokens": prompt_tokens + answer_tokens,
            "mean_answer_tokens": round(answer_tokens / len(lines), 1),
            "mean_input_tokens": round((prompt_tokens + answer_tokens) / len(lines), 1),
            "s_per_answer": round(run_s / len(lines), 3),
            "ms_per_answer_token": round(1000 * run_s / answer_tokens, 2),
            "ms_per_input_token": round(1000 * run_s / (prompt_tokens + answer_tokens), 2)}


def main() -> None:
    args = KQA.parse_args(__doc__.split("\n")[0], 500, "/tmp/bench_risk_pubmedqa")

    rows = load_pubmedqa()
    order = list(rows)
    random.Random(args.seed).shuffle(order)
    chosen = order[: args.questions] if args.questions else order
    pool, lexicon_size = KQA.drug_pool(conclusion(r) for r in rows)
    examples = make_examples(chosen, KQA.Editor(pool, args.seed))
    found = KQA.features_for(args, examples, f"{len(chosen)} questions", len(pool), show=40)
    if found is None:
        return
    feats, timing, counts = found
    from transformers import AutoTokenizer

    lines, _ = load_features(args.work)
    timing = token_cost(args.work, lines, AutoTokenizer.from_pretrained(args.model))
    data = {"questions_total": len(rows), "questions_used": len(chosen),
            "examples": len(examples), "by_type": dict(sorted(counts.items())),
            "final_decision": dict(sorted(Counter(r["final_decision"] for r in chosen).items())),
            "drug_pool": len(pool), "drug_lexicon": lexicon_size}
    KQA.analyse(args, data, feats, timing, bench="bench_risk_pubmedqa", out="risk_pubmedqa",
                data_file=PUBMEDQA, render=markdown)


def markdown(r: dict[str, Any]) -> str:
    d = r["data"]
    lines = [
        "# Hallucination risk with a real model: Gemma 3 270M on PubMedQA conclusions",
        "",
        "`python benchmarks/bench_risk_pubmedqa.py` (see its docstring). Scorer: `hf:` Gemma "
        "3 270M **base** model, float32, one scorer, "
        f"{r['features']['n_features']} features (schema {r['features']['schema_version']}).",
        "",
        f"Data: {d['questions_used']} of the {d['questions_total']} expert-labelled PubMedQA "
        "questions (`pqal_dev500.json`, the only labelled split in `shared/data`; final "
        "decisions " + ", ".join(f"{k} {v}" for k, v in d["final_decision"].items())
        + "). The abstract's conclusion (`LONG_ANSWER`) is a FACT; where a rule of the NLI "
        "corpus builder applies, one edited copy is a HALLUCINATION (rule-flipped "
        "conclusion; edit types: "
        + ", ".join(f"{k} {v}" for k, v in d["by_type"].items() if k != "FACT")
        + f"; {d['by_type'].get('FACT', 0)} facts). The model sees the question, not the "
        f"abstract. Split by question: {d['train_questions']} train / {d['test_questions']} "
        f"test questions ({d['train_examples']} / {d['test_examples']} examples; test: "
        f"{d['test_facts']} facts, {d['test_counterfactuals']} flipped, {d['test_pairs']} "
        "pairs). Classifier: `medverify risk train` on the train file; all numbers on test. "
        "CF below = the flipped conclusion.",
        "",
    ]
    c = r["cost"]
    tokens = [
        f"Per token (same timed run): {c['mean_answer_tokens']} answer tokens and "
        f"{c['mean_input_tokens']} input tokens (prompt + answer) per example on average = "
        f"{c['ms_per_answer_token']} ms per answer token, {c['ms_per_input_token']} ms per "
        "input token. The 2 cores were shared with other jobs during this run (several "
        "processes at once), so this is a loaded-machine cost, well above the model's own.",
        "",
    ]
    return "\n".join(lines + KQA.body(r) + tokens)


if __name__ == "__main__":
    main()
