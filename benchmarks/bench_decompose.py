"""The rule decomposer against human claim decompositions, and its throughput.

Data (skipped cleanly when ``../shared/data`` is absent):

- ExpertQA (``answers/expertqa_val.jsonl``): real LLM answers with the claims that domain
  experts judged (``claims[].claim``, roughly one per answer sentence);
- FActScore (``raw/factscore-human/.../labeled_data/*.jsonl``): biographies written by
  ChatGPT, InstructGPT and PerplexityAI, with human-written atomic facts per sentence
  (and the InstructGPT-generated ``model-atomic-facts``, reported as a reference point).

Measures: segments per second, claims per answer vs the human counts, and alignment:
``recall@0.5`` = share of human claims whose best-matching rule claim has token-F1 >= 0.5,
``precision@0.5`` = share of rule claims whose best-matching human claim has token-F1 >=
0.5. Writes ``benchmarks/results/decompose.json`` and ``.md``.

    .venv/bin/python benchmarks/bench_decompose.py
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medverify.citations import strip_markers
from medverify.decompose import RuleDecomposer, segment
from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir()
RESULTS = ROOT / "benchmarks" / "results"
FACTSCORE = Path("raw/factscore-human/third_party/factscore/labeled_data")
_TOKEN = re.compile(r"\w+")


@dataclass(frozen=True)
class Example:
    """One answer and a reference decomposition of it."""

    text: str
    reference: list[str]


def tokens(text: str) -> Counter[str]:
    return Counter(t.lower() for t in _TOKEN.findall(strip_markers(text)[0]))


def token_f1(a: Counter[str], b: Counter[str]) -> float:
    overlap = sum((a & b).values())
    if not overlap:
        return 0.0
    precision, recall = overlap / sum(a.values()), overlap / sum(b.values())
    return 2 * precision * recall / (precision + recall)


def best_f1(item: Counter[str], pool: Sequence[Counter[str]]) -> float:
    return max((token_f1(item, other) for other in pool), default=0.0)


def expertqa(data: Path) -> list[Example]:
    rows = [json.loads(line) for line in (data / "answers" / "expertqa_val.jsonl").open()]
    return [Example(r["answer"], [c["claim"] for c in r["claims"]]) for r in rows if r["claims"]]


def _factscore_rows(data: Path) -> Iterator[dict[str, Any]]:
    for path in sorted((data / FACTSCORE).glob("*.jsonl")):
        for line in path.open():
            row = json.loads(line)
            if row.get("annotations"):
                yield row


def _facts(row: dict[str, Any], key: str) -> list[str]:
    return [f["text"] for a in row["annotations"] for f in (a.get(key) or [])]


def factscore(data: Path, key: str = "human-atomic-facts") -> list[Example]:
    return [Example(r["output"], _facts(r, key)) for r in _factscore_rows(data) if _facts(r, key)]


def alignment(examples: Sequence[Example], predicted: Sequence[list[str]]) -> dict[str, float]:
    recall_hits, recall_f1, precision_hits, n_pred = 0, [], 0, 0
    for example, claims in zip(examples, predicted, strict=True):
        ref = [tokens(t) for t in example.reference]
        pred = [tokens(t) for t in claims]
        scores = [best_f1(r, pred) for r in ref]
        recall_f1.extend(scores)
        recall_hits += sum(s >= 0.5 for s in scores)
        precision_hits += sum(best_f1(p, ref) >= 0.5 for p in pred)
        n_pred += len(pred)
    n_ref = len(recall_f1)
    return {"recall@0.5": round(recall_hits / n_ref, 4),
            "precision@0.5": round(precision_hits / max(n_pred, 1), 4),
            "mean_best_f1": round(statistics.fmean(recall_f1), 4)}


def counts(examples: Sequence[Example], predicted: Sequence[list[str]]) -> dict[str, float]:
    ours = [len(p) for p in predicted]
    ref = [len(e.reference) for e in examples]
    ratios = [o / r for o, r in zip(ours, ref, strict=True)]
    return {"claims_per_answer": round(statistics.fmean(ours), 2),
            "reference_claims_per_answer": round(statistics.fmean(ref), 2),
            "median_count_ratio": round(statistics.median(ratios), 3),
            "count_correlation": round(statistics.correlation(ours, ref), 3)}


def evaluate(examples: Sequence[Example], split: bool) -> dict[str, Any]:
    decomposer = RuleDecomposer(split_coordinated=split)
    started = time.perf_counter()
    predicted = [[c.text for c in decomposer.decompose_text(e.text)] for e in examples]
    wall = time.perf_counter() - started
    return {"split_coordinated": split, "wall_s": round(wall, 3),
            **counts(examples, predicted), **alignment(examples, predicted)}


def throughput(examples: Sequence[Example], size: int = 5_000_000) -> dict[str, float]:
    corpus = "\n\n".join(e.text for e in examples)
    started = time.perf_counter()
    n_segments = sum(len(segment(e.text)) for e in examples)
    seg_wall = time.perf_counter() - started
    big = (corpus * (size // len(corpus) + 1))[:size]
    started = time.perf_counter()
    n_claims = len(RuleDecomposer().decompose_text(big))
    big_wall = time.perf_counter() - started
    return {"segments": n_segments, "segments_per_s": round(n_segments / seg_wall),
            "chars_per_s": round(len(corpus) / seg_wall),
            "five_mb_chars": size, "five_mb_claims": n_claims, "five_mb_wall_s": round(big_wall, 2)}


def dataset_report(name: str, examples: Sequence[Example]) -> dict[str, Any]:
    return {"dataset": name, "answers": len(examples),
            "reference_claims": sum(len(e.reference) for e in examples),
            "rules": evaluate(examples, split=True),
            "rules_no_coordination_split": evaluate(examples, split=False)}


def reference_point(data: Path) -> dict[str, Any]:
    """FActScore's own InstructGPT decomposition scored against the human facts."""
    human = {e.text: e for e in factscore(data)}
    model = [e for e in factscore(data, "model-atomic-facts") if e.text in human]
    examples = [human[e.text] for e in model]
    predicted = [e.reference for e in model]
    return {"answers": len(examples), **counts(examples, predicted),
            **alignment(examples, predicted)}


def render_markdown(result: dict[str, Any]) -> str:
    lines = ["# Rule decomposer benchmark", "",
             f"Command: `{result['command']}`  ", f"Machine: {result['machine']}", "",
             "| dataset | variant | answers | claims/answer (ours) | claims/answer (human) | "
             "median ratio | count r | recall@0.5 | precision@0.5 | mean best F1 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for ds in result["datasets"]:
        for variant in ("rules", "rules_no_coordination_split"):
            r = ds[variant]
            lines.append(f"| {ds['dataset']} | {variant} | {ds['answers']} | "
                         f"{r['claims_per_answer']} | {r['reference_claims_per_answer']} | "
                         f"{r['median_count_ratio']} | {r['count_correlation']} | "
                         f"{r['recall@0.5']} | {r['precision@0.5']} | {r['mean_best_f1']} |")
    ref = result["factscore_model_facts_reference"]
    lines.append(f"| factscore | InstructGPT atomic facts (reference) | {ref['answers']} | "
                 f"{ref['claims_per_answer']} | {ref['reference_claims_per_answer']} | "
                 f"{ref['median_count_ratio']} | {ref['count_correlation']} | "
                 f"{ref['recall@0.5']} | {ref['precision@0.5']} | {ref['mean_best_f1']} |")
    t = result["throughput"]
    lines += ["", f"Throughput: {t['segments_per_s']:,} segments/s ({t['chars_per_s']:,} chars/s) "
              f"over {t['segments']:,} ExpertQA segments; a {t['five_mb_chars']:,}-char answer "
              f"(ExpertQA text repeated) -> {t['five_mb_claims']:,} claims in "
              f"{t['five_mb_wall_s']} s.", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if not (args.data / "answers" / "expertqa_val.jsonl").exists():
        print(f"skipped: {args.data} is not available", file=sys.stderr)
        return 0
    eqa, fs = expertqa(args.data), factscore(args.data)
    result = {
        "command": "python benchmarks/bench_decompose.py",
        "machine": f"{platform.machine()}, {platform.python_implementation()} "
                   f"{platform.python_version()}",
        "datasets": [dataset_report("expertqa_val", eqa), dataset_report("factscore", fs)],
        "factscore_model_facts_reference": reference_point(args.data),
        "throughput": throughput(eqa),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decompose.json").write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    (args.out / "decompose.md").write_text(render_markdown(result), "utf-8")
    print(render_markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
