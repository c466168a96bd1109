"""The exact checks (:func:`medverify.judge.checks.find_conflicts`) on real labelled
claim-evidence pairs: how often each check vetoes, how often a veto hits a pair whose gold
label is SUPPORTED (a false veto), and the time per pair.

Data: ``../shared/data/pairs/*.jsonl`` (lines ``{"claim", "evidence", "label"}``, labels
SUPPORTED / CONTRADICTED / NOT_ENOUGH_INFO, or 2-way SUPPORTED / NOT_SUPPORTED); files that
are absent are skipped. ``checkcovid_train``, ``citint_train`` and ``scifact_train`` were
used to tune the rules; ``checkcovid_dev``, ``citint_dev``, ``healthver_dev``,
``expertqa_val``, ``covidfact_dev`` and ``covidfact_train`` were not looked at while tuning
and measure them.

A veto's false share should be compared with the file's base rate of SUPPORTED: a check
that vetoed at random would hit SUPPORTED pairs at that rate. Writes
``benchmarks/results/exact_checks.json`` and ``.md``.

    .venv/bin/python benchmarks/bench_exact_checks.py
    .venv/bin/python benchmarks/bench_exact_checks.py --show number --files scifact_train
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medverify.files import data_dir
from medverify.judge.checks import find_conflicts
from medverify.judge.checks.words import WORDNET_DIR, wordnet_antonyms
from medverify.records import CheckKind

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir() / "pairs"
RESULTS = ROOT / "benchmarks" / "results"
TUNED = ("checkcovid_train", "citint_train", "scifact_train")
MEASURED = ("checkcovid_dev", "citint_dev", "healthver_dev", "expertqa_val", "covidfact_dev",
            "covidfact_train")
KINDS = [kind.value for kind in CheckKind]


@dataclass
class Tally:
    """Counts for one file."""

    pairs: int = 0
    labels: Counter[str] = field(default_factory=Counter)
    vetoed: Counter[str] = field(default_factory=Counter)  # kind or "any" -> pairs
    vetoed_supported: Counter[str] = field(default_factory=Counter)
    vetoed_contradicted: Counter[str] = field(default_factory=Counter)
    flagged: Counter[str] = field(default_factory=Counter)  # non-veto findings, per kind
    flagged_supported: Counter[str] = field(default_factory=Counter)
    seconds: list[float] = field(default_factory=list)
    chars: int = 0
    false_examples: list[dict[str, str]] = field(default_factory=list)


def run_file(path: Path, show: str | None) -> Tally:
    tally = Tally()
    for line in path.read_text("utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        claim, evidence, label = row["claim"], row["evidence"], row["label"]
        start = time.perf_counter()
        findings = find_conflicts(claim, evidence, "p")
        tally.seconds.append(time.perf_counter() - start)
        tally.pairs += 1
        tally.chars += len(evidence)
        tally.labels[label] += 1
        vetoes = {f.kind.value for f in findings if f.veto}
        flags = {f.kind.value for f in findings if not f.veto}
        for kind in vetoes | ({"any"} if vetoes else set()):
            tally.vetoed[kind] += 1
            tally.vetoed_supported[kind] += label == "SUPPORTED"
            tally.vetoed_contradicted[kind] += label == "CONTRADICTED"
        for kind in flags | ({"any"} if flags else set()):
            tally.flagged[kind] += 1
            tally.flagged_supported[kind] += label == "SUPPORTED"
        if vetoes and label == "SUPPORTED" and len(tally.false_examples) < 8:
            tally.false_examples.append({"claim": claim, "reasons": "; ".join(
                f"{f.kind.value}: {f.reason}" for f in findings if f.veto)})
        if show and any(f.kind.value == show for f in findings):
            print(f"[{label}] {claim}\n    " + "\n    ".join(
                f"{f.kind.value} veto={f.veto}: {f.reason}" for f in findings
                if f.kind.value == show) + "\n")
    return tally


def summary(name: str, tally: Tally) -> dict[str, Any]:
    def share(num: int, den: int) -> float | None:
        return round(num / den, 3) if den else None

    per_kind = {}
    for kind in [*KINDS, "any"]:
        per_kind[kind] = {
            "vetoed": tally.vetoed[kind],
            "false_veto_share": share(tally.vetoed_supported[kind], tally.vetoed[kind]),
            "contradicted_share": share(tally.vetoed_contradicted[kind], tally.vetoed[kind]),
            "flagged": tally.flagged[kind],
            "flagged_supported_share": share(tally.flagged_supported[kind], tally.flagged[kind]),
        }
    micros = [s * 1e6 for s in tally.seconds] or [0.0]
    return {
        "file": name,
        "role": "tuned on" if name in TUNED else "measured",
        "pairs": tally.pairs,
        "labels": dict(tally.labels),
        "supported_base_rate": share(tally.labels["SUPPORTED"], tally.pairs),
        "per_kind": per_kind,
        "us_per_pair_mean": round(statistics.fmean(micros), 1),
        "us_per_pair_p50": round(statistics.median(micros), 1),
        "us_per_pair_p99": round(sorted(micros)[int(0.99 * (len(micros) - 1))], 1),
        "us_per_1000_chars": round(sum(micros) / max(1, tally.chars) * 1000, 1),
        "mean_passage_chars": round(tally.chars / max(1, tally.pairs)),
        "false_veto_examples": tally.false_examples,
    }


def pooled(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per role and kind: vetoed pairs, false vetoes, and the false vetoes expected if the
    same number of pairs had been vetoed at random in each file (its SUPPORTED base rate)."""
    rows = []
    for role in ("tuned on", "measured"):
        group = [r for r in results if r["role"] == role]
        for kind in [*KINDS, "any"]:
            vetoed = sum(r["per_kind"][kind]["vetoed"] for r in group)
            false = sum(round(r["per_kind"][kind]["vetoed"]
                              * (r["per_kind"][kind]["false_veto_share"] or 0)) for r in group)
            random = sum(r["per_kind"][kind]["vetoed"] * (r["supported_base_rate"] or 0)
                         for r in group)
            rows.append({"role": role, "kind": kind, "pairs": sum(r["pairs"] for r in group),
                         "vetoed": vetoed, "false_vetoes": false,
                         "false_veto_share": round(false / vetoed, 3) if vetoed else None,
                         "expected_if_random": round(random / vetoed, 3) if vetoed else None})
    return rows


def render(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# Exact checks on labelled claim-evidence pairs",
        "",
        f"Command: `{meta['command']}`  ",
        f"Machine: {meta['machine']}, CPython {meta['python']}; WordNet: {meta['wordnet']}",
        "",
        "Vetoed = pairs with at least one veto of that kind; false = share of the vetoed pairs "
        "whose gold label is SUPPORTED (compare with the file's SUPPORTED base rate); "
        "contra = share that are CONTRADICTED (3-way files). Flagged = pairs with a finding "
        "that does not veto.",
        "",
        "| file | role | pairs | SUPPORTED base | kind | vetoed | false | contra "
        "| flagged | flagged SUPPORTED |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for kind in [*KINDS, "any"]:
            k = r["per_kind"][kind]
            lines.append(
                f"| {r['file']} | {r['role']} | {r['pairs']} | {_fmt(r['supported_base_rate'])} "
                f"| {kind} | {k['vetoed']} | {_fmt(k['false_veto_share'])} "
                f"| {_fmt(k['contradicted_share'])} | {k['flagged']} "
                f"| {_fmt(k['flagged_supported_share'])} |")
    lines += ["", "Pooled over the files of each role (expected if random: the false-veto share "
              "if the same pairs per file had been vetoed at random):", "",
              "| role | pairs | kind | vetoed | false vetoes | false share "
              "| expected if random |", "|---|---|---|---|---|---|---|"]
    for p in pooled(results):
        lines.append(f"| {p['role']} | {p['pairs']} | {p['kind']} | {p['vetoed']} "
                     f"| {p['false_vetoes']} | {_fmt(p['false_veto_share'])} "
                     f"| {_fmt(p['expected_if_random'])} |")
    lines += ["", "| file | mean passage chars | µs/pair mean | p50 | p99 | µs per 1,000 chars |",
              "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['file']} | {r['mean_passage_chars']} | {r['us_per_pair_mean']} "
                     f"| {r['us_per_pair_p50']} | {r['us_per_pair_p99']} "
                     f"| {r['us_per_1000_chars']} |")
    return "\n".join(lines) + "\n"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--files", nargs="*", default=[*TUNED, *MEASURED])
    parser.add_argument("--show", choices=KINDS, help="print the findings of this kind")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    wordnet = f"{len(wordnet_antonyms())} words ({WORDNET_DIR})" if wordnet_antonyms() else "absent"
    find_conflicts("Aspirin lowers fever.", "Aspirin lowers fever in adults.")  # warm caches
    results = []
    for name in args.files:
        path = args.data / f"{name}.jsonl"
        if not path.is_file():
            print(f"skip {name}: {path} not found", file=sys.stderr)
            continue
        results.append(summary(name, run_file(path, args.show)))
        r = results[-1]
        print(f"{name}: {r['pairs']} pairs, any veto {r['per_kind']['any']['vetoed']} "
              f"(false {r['per_kind']['any']['false_veto_share']}, base "
              f"{r['supported_base_rate']}), {r['us_per_pair_mean']} µs/pair", file=sys.stderr)
    meta = {"command": "python benchmarks/bench_exact_checks.py", "wordnet": wordnet,
            "machine": platform.machine(), "python": platform.python_version()}
    if not args.no_write and results:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "exact_checks.json").write_text(
            json.dumps({"meta": meta, "results": results, "pooled": pooled(results)}, indent=2,
                       ensure_ascii=False) + "\n",
            "utf-8")
        (RESULTS / "exact_checks.md").write_text(render(results, meta), "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
