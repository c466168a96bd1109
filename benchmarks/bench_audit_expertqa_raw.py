"""The citation audit on the raw ExpertQA file (issue 13, defect 4): its ``attribution``
field and claim ``evidence`` are read, so the audit measures something instead of a silent
0 %. Runs ``medverify audit ../shared/data/answers/expertqa_val.jsonl --offline`` (built-in
judge, default pairing) in a child process and records what the summary says.

    .venv/bin/python benchmarks/bench_audit_expertqa_raw.py

Writes benchmarks/results/audit_expertqa_raw.{json,md}.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from medverify.audit.records import AnswerAudit, AuditSummary, Estimate
from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir() / "answers" / "expertqa_val.jsonl"
RESULTS = ROOT / "benchmarks" / "results"


def _estimate(estimate: Estimate) -> str:
    if estimate.value is None or estimate.ci is None:
        return f"not measured ({estimate.reason})"
    low, high = estimate.ci
    return f"{100 * estimate.value:.1f} % [{100 * low:.1f}, {100 * high:.1f}] (n {estimate.n:,})"


def main() -> None:
    if not DATA.is_file():
        sys.exit(f"{DATA} not found (../shared/data is needed)")
    with tempfile.TemporaryDirectory() as tmp:
        out, env = Path(tmp) / "audit", {**os.environ, "MEDVERIFY_HOME": tmp,
                                         "HF_HUB_OFFLINE": "1"}
        started = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "medverify", "audit", str(DATA), "--out",
                              str(out), "--offline"], env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        summary = AuditSummary.model_validate_json((out / "summary.json").read_text("utf-8"))
        audits = [AnswerAudit.model_validate_json(line) for line in
                  (out / "answers.jsonl").read_text("utf-8").splitlines() if line.strip()]
    overall = summary.overall
    sources = [s for a in audits for s in a.answer.sources]
    result = {
        "command": f"medverify audit {DATA.name} --offline", "exit": run.returncode,
        "wall_s": round(seconds, 1), "judge": summary.judge, "answers": overall.n_answers,
        "answers_with_sources": sum(1 for a in audits if a.answer.sources),
        "urls": overall.n_urls, "sources_with_given_text": sum(1 for s in sources if s.text),
        "claims": overall.n_claims, "pairs": overall.n_pairs,
        "url_validity": overall.url_validity.model_dump(mode="json"),
        "statement_support": overall.statement_support.model_dump(mode="json"),
        "response_support": overall.response_support.model_dump(mode="json"),
        "invalid_reasons": overall.invalid_reasons, "warnings": summary.warnings,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "audit_expertqa_raw.json").write_text(json.dumps(result, indent=2) + "\n")
    reasons = ", ".join(f"{k} {v:,}" for k, v in overall.invalid_reasons.items())
    lines = [
        "# Citation audit of the raw ExpertQA file",
        "",
        f"`python benchmarks/bench_audit_expertqa_raw.py`: `{result['command']}`, judge "
        f"`{summary.judge}`, exit {run.returncode}, {seconds:.0f} s. Before issue 13 the "
        "`attribution` field was ignored: 0 URLs, support 0.0 % [0.0, 0.0], exit 0.",
        "",
        "| what | value |",
        "|---|---|",
        f"| answers with sources | {result['answers_with_sources']:,} of {overall.n_answers:,} |",
        f"| cited URLs | {overall.n_urls:,} ({result['sources_with_given_text']:,} sources "
        "with frozen text) |",
        f"| statements / pairs judged | {overall.n_claims:,} / {overall.n_pairs:,} |",
        f"| URL validity | {_estimate(overall.url_validity)} |",
        f"| statement-level support | {_estimate(overall.statement_support)} |",
        f"| response-level support | {_estimate(overall.response_support)} |",
        f"| invalid URL reasons | {reasons} |",
        "",
        *[f"- warning: {w}" for w in summary.warnings],
        "",
    ]
    (RESULTS / "audit_expertqa_raw.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
