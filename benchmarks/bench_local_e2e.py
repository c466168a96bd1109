"""Issue 28's end-to-end target: `check` and `factcheck` with a local model and no server.

    .venv/bin/python benchmarks/bench_local_e2e.py [--model local:qwen2.5-0.5b]
        [--answer demo-shingles] [--work DIR]

Builds (or reuses) the demo knowledge base (`medverify demo --out WORK/demo`), then on one
demo answer with planted errors:

1. `medverify check --judge llm --model MODEL --decomposer rules`: the generating LLM judge
   (JSON with quotes) on every claim; reports each claim's category against the planted
   one, the errors (unparseable JSON, failed calls) and the seconds;
2. `medverify factcheck --model MODEL`: every stage with the local model; reports whether
   the planted error is gone from the corrected answer.

Needs `medverify models prepare qwen2.5-0.5b`. Writes benchmarks/results/local_e2e.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ANSWERS = ROOT / "src" / "medverify" / "data" / "demo_answers.jsonl"


CONFIG: list[str] = []  # --config FILE: the request cache off, so every call is real


def medverify(*args: str) -> tuple[int, float, str]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "medverify", *args, *CONFIG],
                          capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "160"})
    return done.returncode, time.perf_counter() - started, done.stdout + done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="local:qwen2.5-0.5b")
    parser.add_argument("--answer", default="demo-shingles")
    home = Path(os.environ.get("MEDVERIFY_HOME") or Path.home() / ".medverify")
    parser.add_argument("--work", type=Path, default=home / "bench-local-e2e")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    config = args.work / "no-cache.toml"
    config.write_text("[llm]\ncache = false\n", "utf-8")
    kb = args.work / "demo" / "kb"
    if not kb.is_dir():
        medverify("demo", "--out", str(args.work / "demo"), "--no-record")
    answer = next(json.loads(line) for line in ANSWERS.read_text("utf-8").splitlines()
                  if json.loads(line)["id"] == args.answer)
    answer_file = args.work / f"{args.answer}.txt"
    answer_file.write_text(answer["text"] + "\n", "utf-8")
    args.question = answer["question"]
    planted = {e["text"]: e["category"] for e in answer["meta"]["expected"]}
    CONFIG[:] = ["--config", str(config)]
    out: dict = {"model": args.model, "answer": args.answer}
    out["check"] = run_check(args, kb, answer_file, planted)
    out["factcheck"] = run_factcheck(args, kb, answer_file, planted)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "local_e2e.json").write_text(json.dumps(out, indent=1) + "\n", "utf-8")
    (RESULTS / "local_e2e.md").write_text(markdown(out), "utf-8")
    print(markdown(out))


def run_check(args: argparse.Namespace, kb: Path, answer_file: Path,
              planted: dict[str, str]) -> dict:
    report_file = args.work / "check.json"
    code, seconds, log = medverify("check", str(answer_file), "-q", args.question, "--kb",
                                   str(kb), "--judge", "llm", "--model", args.model,
                                   "--decomposer", "rules", "--json", str(report_file),
                                   "--no-record")
    if not report_file.is_file():
        return {"exit": code, "seconds": round(seconds, 1), "log": log[-2000:]}
    report = json.loads(report_file.read_text("utf-8"))
    report = report[0] if isinstance(report, list) else report
    claims = [{"claim": r["claim"]["text"], "category": r["category"],
               "planted": planted.get(r["claim"]["text"]),
               "error": (r.get("verdict") or {}).get("error")} for r in report["results"]]
    raw = next((r["verdict"].get("raw_output") for r in report["results"]
                if r.get("verdict") and r["verdict"].get("raw_output")), None)
    return {"exit": code, "seconds": round(seconds, 1), "claims": claims,
            "usage": report.get("usage"), "raw_reply_start": (raw or "")[:300],
            "agree": sum(c["category"] == c["planted"] for c in claims),
            "errors": sum(c["category"] == "ERROR" for c in claims)}


def run_factcheck(args: argparse.Namespace, kb: Path, answer_file: Path,
                  planted: dict[str, str]) -> dict:
    report_file = args.work / "factcheck.json"
    code, seconds, log = medverify("factcheck", str(answer_file), "-q", args.question, "--kb",
                                   str(kb), "--model", args.model, "--json", str(report_file),
                                   "--no-record")
    if not report_file.is_file():
        return {"exit": code, "seconds": round(seconds, 1), "log": log[-2000:]}
    report = json.loads(report_file.read_text("utf-8"))
    report = report[0] if isinstance(report, list) else report
    wrong = [text for text, category in planted.items() if category != "FACT"]
    final = report.get("final_answer") or report.get("corrected_answer") or ""
    facts = [{"fact": f.get("text"), "category": f.get("category")}
             for f in report.get("facts", [])]
    return {"exit": code, "seconds": round(seconds, 1), "final_answer": final,
            "final_mode": report.get("final_mode"), "facts": facts, "planted_errors": wrong,
            "planted_error_still_there": [w for w in wrong if w in final],
            "errors": report.get("errors", [])}


def markdown(out: dict) -> str:
    check, fact = out["check"], out["factcheck"]
    lines = [f"# Local model end to end ({out['model']}, answer {out['answer']})", "",
             f"`medverify check --judge llm --model {out['model']}`: exit {check['exit']}, "
             f"{check['seconds']} s", ""]
    if "claims" in check:
        lines += ["| claim | category | planted | error |", "|---|---|---|---|"]
        lines += [f"| {c['claim']} | {c['category']} | {c['planted']} | {c['error'] or ''} |"
                  for c in check["claims"]]
        lines += ["", f"{check['agree']} of {len(check['claims'])} agree with the planted "
                  f"labels; {check['errors']} ERROR.", ""]
    lines += [f"`medverify factcheck --model {out['model']}`: exit {fact['exit']}, "
              f"{fact['seconds']} s", ""]
    if "final_answer" in fact:
        gone = not fact["planted_error_still_there"]
        lines += [f"Final answer: {fact['final_answer']}", "",
                  f"Planted error removed or corrected: {'yes' if gone else 'no'}"]
    else:
        lines += ["No report was written:", "", "```", fact.get("log", ""), "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
