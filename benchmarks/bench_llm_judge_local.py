"""Issue 42's local-model target: the generating LLM judge with the packaged Qwen models.

    nice -n 10 .venv/bin/python benchmarks/bench_llm_judge_local.py \
        [--models local:qwen2.5-1.5b local:qwen2.5-0.5b] [--limit N] [--budget-s S] [--work DIR]

Builds (or reuses) the demo knowledge base (`medverify demo --out WORK/demo`), then for each
model and each demo answer (`src/medverify/data/demo_answers.jsonl`, in order, at most
``--limit``) runs `medverify check --judge llm --model MODEL --decomposer rules` with the
request cache off and `[judge_settings] logprobs` on, and counts per model: claims judged,
the share that got a verdict (not ERROR; target: at least 90 % with qwen2.5-1.5b), the ERROR
reasons (counted by their first words), how many verdicts carry log-prob signals, the judge
calls and seconds per call (one call judges a batch of up to `claims_per_call` claims; the
seconds are the whole `check` run's, model load and retrieval included), whether this CPU
computes bfloat16 natively and the torch dtype the local provider used. A model stops
starting new answers once ``--budget-s`` seconds are spent on it. Results are rewritten
after every answer, so a stopped run keeps what it measured.

Needs `medverify models prepare qwen2.5-1.5b` (and `qwen2.5-0.5b`; docs/judges.md).
Writes benchmarks/results/STEM.{json,md} (`--stem`, default llm_judge_local).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ANSWERS = ROOT / "src" / "medverify" / "data" / "demo_answers.jsonl"
STEM = "llm_judge_local"
TARGET = 0.9


def medverify(config: Path | None, *args: str) -> tuple[int, float, str]:
    started = time.perf_counter()
    tail = ["--config", str(config)] if config else []
    done = subprocess.run([sys.executable, "-m", "medverify", *args, *tail],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "160"})
    return done.returncode, time.perf_counter() - started, done.stdout + done.stderr


def machine() -> dict[str, Any]:
    from medverify.llm.local import cpu_has_bf16

    flags = Path("/proc/cpuinfo").read_text("utf-8", "replace")
    dtype = os.environ.get("MEDVERIFY_LOCAL_DTYPE") or (
        "bfloat16" if cpu_has_bf16() else "float32")
    return {"avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags,
            "torch_dtype": dtype, "cpus": os.cpu_count()}


def reason_key(error: str) -> str:
    """An ERROR reason without its claim-specific parts (quoted text, offsets, labels)."""
    error = re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", error)
    error = re.sub(r"\(shown: [^)]*\)|at char \d+|line \d+ column \d+", "", error)
    return " ".join(error.split())[:140]


def check_answer(config: Path, work: Path, kb: Path, model: str,
                 answer: dict[str, Any]) -> dict[str, Any]:
    text_file = work / f"{answer['id']}.txt"
    text_file.write_text(answer["text"] + "\n", "utf-8")
    report_file = work / f"{answer['id']}.{model.replace(':', '_')}.json"
    report_file.unlink(missing_ok=True)
    code, seconds, log = medverify(config, "check", str(text_file), "-q", answer["question"],
                                   "--kb", str(kb), "--judge", "llm", "--model", model,
                                   "--decomposer", "rules", "--json", str(report_file),
                                   "--no-record")
    if not report_file.is_file():
        return {"answer": answer["id"], "exit": code, "seconds": round(seconds, 1),
                "log": log[-1500:], "claims": []}
    report = json.loads(report_file.read_text("utf-8"))
    report = report[0] if isinstance(report, list) else report
    claims = []
    for result in report["results"]:
        verdict = result.get("verdict") or {}
        claims.append({"claim": result["claim"]["text"], "category": result["category"],
                       "error": verdict.get("error"), "signals": verdict.get("signals") or {}})
    calls = ((report.get("usage") or {}).get("judge") or {}).get("calls", 0)
    return {"answer": answer["id"], "exit": code, "seconds": round(seconds, 1),
            "judge_calls": calls, "claims": claims}


def summary(model: str, answers: list[dict[str, Any]]) -> dict[str, Any]:
    claims = [c for a in answers for c in a["claims"]]
    errors = [c for c in claims if c["category"] == "ERROR"]
    calls = sum(a.get("judge_calls", 0) for a in answers)
    seconds = sum(a["seconds"] for a in answers)
    judged = len(claims) - len(errors)
    return {
        "model": model, "answers": len(answers), "claims": len(claims),
        "verdicts": judged, "verdict_share": round(judged / len(claims), 4) if claims else None,
        "meets_target": bool(claims) and judged / len(claims) >= TARGET,
        "error_reasons": dict(Counter(reason_key(c["error"] or "no verdict")
                                      for c in errors).most_common()),
        "with_logprob_signals": sum("p_supported" in c["signals"] for c in claims),
        "json_retries": sum(int(c["signals"].get("json_retries", 0)) for c in claims),
        "categories": dict(Counter(c["category"] for c in claims)),
        "judge_calls": calls, "seconds": round(seconds, 1),
        "s_per_judge_call": round(seconds / calls, 1) if calls else None,
    }


def markdown(out: dict[str, Any]) -> str:
    m = out["machine"]
    lines = [
        "# The generating LLM judge with the packaged local models (issue 42)", "",
        f"Demo answers, rules decomposer, demo KB, `--judge llm`, request cache off, "
        f"log-probs on. CPU: {m['cpus']} cores, avx512_bf16 {m['avx512_bf16']}, amx_bf16 "
        f"{m['amx_bf16']}; torch dtype {m['torch_dtype']}. Target: a verdict (not ERROR) on "
        f"at least {TARGET:.0%} of the claims with qwen2.5-1.5b.", "",
        "Config:", "", "```toml", out["config"].strip(), "```", "",
        "| model | answers | claims | verdicts | share | target met | with log-prob signals "
        "| JSON retries | judge calls | s per call |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in out["models"]:
        share = "" if s["verdict_share"] is None else f"{s['verdict_share']:.1%}"
        lines.append(f"| {s['model']} | {s['answers']} | {s['claims']} | {s['verdicts']} | "
                     f"{share} | {'yes' if s['meets_target'] else 'no'} | "
                     f"{s['with_logprob_signals']} | {s['json_retries']} | {s['judge_calls']} | "
                     f"{s['s_per_judge_call']} |")
    for s in out["models"]:
        lines += ["", f"## {s['model']}", "", f"Categories: {s['categories']}", ""]
        lines += [f"- ERROR x{n}: {reason}" for reason, n in s["error_reasons"].items()]
    lines += ["", "Seconds per call: the whole `check` run (model load, retrieval, "
              "decomposition included) over the judge calls (retries included)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+",
                        default=["local:qwen2.5-1.5b", "local:qwen2.5-0.5b"])
    parser.add_argument("--limit", type=int, default=6, help="demo answers per model")
    parser.add_argument("--budget-s", type=float, default=3600.0,
                        help="no new answer is started on a model after this many seconds")
    home = Path(os.environ.get("MEDVERIFY_HOME") or Path.home() / ".medverify")
    parser.add_argument("--work", type=Path, default=home / "bench-llm-judge-local")
    parser.add_argument("--stem", default=STEM, help="results file name (one per run)")
    parser.add_argument("--claims-per-call", type=int, default=4,
                        help="claims per judge call (the configured default is 4)")
    parser.add_argument("--max-passages", type=int, default=10,
                        help="[judge_settings] max_passages (the default is 10)")
    parser.add_argument("--call-timeout-s", type=float, default=900.0,
                        help="one judge call's time limit (the local default is 900 s)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    config = args.work / f"{args.stem}.toml"
    config.write_text(
        f"claims_per_call = {args.claims_per_call}\n\n[llm]\ncache = false\n"
        f"timeout_s = {args.call_timeout_s}\ncall_budget_s = {args.call_timeout_s}\n"
        "answer_budget_s = 0\n\n[judge_settings]\nlogprobs = true\n"
        f"max_passages = {args.max_passages}\n", "utf-8")
    kb = args.work / "demo" / "kb"
    if not kb.is_dir():
        medverify(None, "demo", "--out", str(args.work / "demo"), "--no-record")
    answers = [json.loads(line) for line in ANSWERS.read_text("utf-8").splitlines()
               if line.strip()][: args.limit]
    out: dict[str, Any] = {"machine": machine(), "limit": args.limit,
                           "budget_s": args.budget_s, "config": config.read_text("utf-8"),
                           "models": [], "runs": {}}
    for model in args.models:
        runs: list[dict[str, Any]] = out["runs"].setdefault(model, [])
        for answer in answers:
            if sum(r["seconds"] for r in runs) >= args.budget_s:
                break
            spec = f"{model}?timeout={args.call_timeout_s:g}&budget={args.call_timeout_s:g}"
            runs.append(check_answer(config, args.work, kb, spec, answer))
            out["models"] = [summary(m, r) for m, r in out["runs"].items()]
            write(out, args.stem)
            print(f"{model} {answer['id']}: {runs[-1]['seconds']} s", flush=True)
    print(markdown(out))


def write(out: dict[str, Any], stem: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(out, indent=1) + "\n", "utf-8")
    (RESULTS / f"{stem}.md").write_text(markdown(out), "utf-8")


if __name__ == "__main__":
    main()
