"""Claim-level agreement of an offline audit with the expert labels of ExpertQA val.

Runs ``medverify audit ../shared/data/audit/expertqa_val.jsonl --offline`` with the
built-in judge, once per pairing (``all``: every claim x every valid source, the paper's
definition; ``cited``: only the sources a claim cites, which is what the ExpertQA experts
judged), then ``eval audit`` on each output: balanced accuracy, agreement and Cohen's kappa
with 95 % bootstrap CIs, over all gold-labelled claims and over the claims judged against at
least one valid source (offline, sources whose page text was not frozen are invalid, so
their claims are unsupported whatever the judge says).

Skips cleanly when ``../shared/data`` is absent. Writes
``benchmarks/results/audit_agreement.json`` and ``.md``.

    .venv/bin/python benchmarks/bench_audit_agreement.py [--limit N] [--pairing all cited]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from medverify.audit.evaluate import AgreementScores, evaluate_audit
from medverify.audit.records import AuditSummary
from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[1]
AUDIT = data_dir() / "audit" / "expertqa_val.jsonl"
RESULTS = ROOT / "benchmarks" / "results"


def run_audit(pairing: str, out: Path, limit: int | None, home: Path) -> float:
    command = [sys.executable, "-m", "medverify", "audit", str(AUDIT), "--offline",
               "--out", str(out), "--pairing", pairing, "--fresh", "--no-record"]
    if limit:
        command += ["--limit", str(limit)]
    env = {**os.environ, "MEDVERIFY_HOME": str(home)}
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def scores_row(scores: AgreementScores) -> dict[str, Any]:
    def est(name: str) -> dict[str, Any]:
        estimate = getattr(scores, name)
        return {"value": estimate.value, "ci": estimate.ci}

    return {"n": scores.n, "n_unscored": scores.n_unscored,
            "gold_supported_rate": scores.gold_supported_rate,
            "predicted_supported_rate": scores.predicted_supported_rate,
            "balanced_accuracy": est("balanced_accuracy"), "agreement": est("agreement"),
            "kappa": est("kappa"), "confusion": scores.confusion}


def measure(pairing: str, limit: int | None, work: Path) -> dict[str, Any]:
    out = work / pairing
    seconds = run_audit(pairing, out, limit, work / "home")
    summary = AuditSummary.model_validate_json((out / "summary.json").read_text("utf-8"))
    evaluation = evaluate_audit(out)
    overall = summary.overall
    return {
        "pairing": pairing, "wall_s": round(seconds, 1), "judge": summary.judge,
        "answers": overall.n_answers, "claims": overall.n_claims, "pairs": overall.n_pairs,
        "pair_errors": overall.n_pair_errors,
        "statement_support": overall.statement_support.value,
        "response_support": overall.response_support.value,
        "url_validity": overall.url_validity.value,
        "all_claims": scores_row(evaluation.overall),
        "with_valid_source": scores_row(evaluation.with_source),
    }


def _fmt(entry: dict[str, Any]) -> str:
    value, ci = entry["value"], entry["ci"]
    if value is None:
        return "—"
    return f"{value:.3f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{value:.3f}"


def markdown(rows: list[dict[str, Any]], load: float) -> str:
    lines = [
        "# Citation audit vs ExpertQA expert labels (offline, built-in judge)", "",
        "Command: `python benchmarks/bench_audit_agreement.py`  ",
        f"Machine: {platform.machine()}, 2 cores; load average at the end {load:.1f}", "",
        "| pairing | claims scored | subset | n | gold S / predicted S | balanced acc. | "
        "agreement | kappa | audit wall s | judge |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for subset in ("all_claims", "with_valid_source"):
            s = row[subset]
            lines.append(
                f"| {row['pairing']} | {row['claims']} | {subset} | {s['n']} | "
                f"{s['gold_supported_rate']:.2f} / {s['predicted_supported_rate']:.2f} | "
                f"{_fmt(s['balanced_accuracy'])} | {_fmt(s['agreement'])} | "
                f"{_fmt(s['kappa'])} | {row['wall_s']} | {row['judge']} |")
    lines += ["", "Gold: ExpertQA support labels (Complete = SUPPORTED; Partial, Incomplete, "
              "Missing = NOT_SUPPORTED). Offline, 638 of 1,414 cited URLs have no frozen text "
              "and are invalid, so `with_valid_source` is the judge's own agreement."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--pairing", nargs="+", default=["cited", "all"])
    args = parser.parse_args()
    if not AUDIT.is_file():
        print(f"skipped: {AUDIT} not found")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(p, args.limit, Path(tmp)) for p in args.pairing]
    load = os.getloadavg()[0]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "audit_agreement.json").write_text(
        json.dumps({"rows": rows, "limit": args.limit, "load_avg": load}, indent=2) + "\n")
    (RESULTS / "audit_agreement.md").write_text(markdown(rows, load))
    print(markdown(rows, load))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
