"""The service's API probed by schemathesis (issue 43, item 2): a bounded, seeded run over
every operation of ``/openapi.json`` with an admin, a reviewer and a client key.

The service runs in this process under uvicorn on a loopback port (a tiny KB, a scripted
judge, queued jobs left queued, rate limits out of the way); schemathesis runs from its own
virtual environment (``--st``, default ``.venv/schemathesis/bin/st``, whose Python runs
benchmarks/schemathesis_cli.py; .ci/run installs the pinned version there) as a black box
against ``/openapi.json``, once per role, with the checks ``not_a_server_error``,
``status_code_conformance``, ``response_schema_conformance``, ``content_type_conformance``
and ``allow_header_conformance``: a 500, an undocumented status or media type, a body that
does not fit the schema, or an ``Allow`` header that names other methods than the schema's
is a failure; so is a run that stops on an error. The admin run leaves out
``POST /v1/keys/{key_id}/revoke``; a fourth run covers it alone with a throwaway admin key,
so no run can revoke the key another run uses. Writes benchmarks/results/<name>.{json,md}
(default ``schemathesis``); ``--check`` exits 1 on any failure (what .ci/run runs).

Usage: python benchmarks/bench_schemathesis.py [--max-examples N] [--seed S] [--check]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.service.app import create_app
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake
from medverify.testing.judge import keyword_rule, scripted_judge
from medverify.testing.service import free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
NAME = "schemathesis"
CHECKS = ("not_a_server_error,status_code_conformance,response_schema_conformance,"
          "content_type_conformance,allow_header_conformance")
PHASES = "examples,coverage,fuzzing"  # not stateful: no links between operations to follow
REVOKE = "/v1/keys/{key_id}/revoke"
DOCS = [Document(doc_id="metformin", title="Metformin",
                 text="Metformin is a first-line medicine for type 2 diabetes. The usual "
                 "starting dose is 500 mg once or twice daily with meals.")]


def _service(tmp: Path) -> tuple[Config, dict[str, str]]:
    """A config over a tiny KB and a fresh store, and the secrets of the keys the runs use
    (one per role, and ``revoker``: the throwaway admin key of the revoke run)."""
    with KnowledgeBase.create(tmp / "kb", embedder="hash") as kb:
        kb.ingest(DOCS)
    register_fake("schemathesis", ScriptedProvider(scripted_judge(keyword_rule(
        supported="first-line", contradicted="5000 mg"))))
    with RunStore(tmp / "store" / "runs.db") as runs:
        keys = KeyStore(runs)
        secrets = {r.value: keys.create(f"{r.value} key", r).secret for r in Role}
        secrets["revoker"] = keys.create("throwaway admin key", Role.ADMIN).secret
    config = Config(kb=tmp / "kb", store=tmp / "store" / "runs.db",
                    cache_path=tmp / "cache.db", model="fake:schemathesis",
                    decomposer="rules",
                    service={"rate_per_minute": 10**6, "rate_burst": 10**6,
                             "auth_failures_per_minute": 10**6, "auth_failure_burst": 10**6,
                             "request_timeout_s": 20.0})
    return config, secrets


def _runs(url: str, secrets: dict[str, str]) -> list[tuple[str, str, list[str]]]:
    """(name, secret, filter options) of each schemathesis run."""
    only_revoke = ["--include-path", REVOKE]
    return [("admin", secrets["admin"], ["--exclude-path", REVOKE]),
            ("reviewer", secrets["reviewer"], []), ("client", secrets["client"], []),
            ("admin (revoke only)", secrets["revoker"], only_revoke)]


CLI = Path(__file__).with_name("schemathesis_cli.py")
"""``st`` with a work-around for a CPython 3.11 bug (see that file)."""


def _schemathesis(st: Path, url: str, secret: str, filters: list[str], args: argparse.Namespace,
                  report: Path) -> dict[str, Any]:
    """One schemathesis run: its exit code, time and the counts of its ndjson report."""
    command = [str(st.parent / "python"), str(CLI), "run", f"{url}/openapi.json",
               "--checks", args.checks, "--phases", PHASES,
               "--max-examples", str(args.max_examples), "--seed", str(args.seed),
               "--workers", str(args.workers), "--request-timeout", "30",
               "--header", f"Authorization: Bearer {secret}", "--no-color",
               "--report", "ndjson", "--report-ndjson-path", str(report), *filters]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    counts = _counts(report)
    return {"exit_code": done.returncode, "seconds": round(seconds, 1), **counts,
            "output_tail": done.stdout[-12000:] + done.stderr[-2000:]}


def _counts(report: Path) -> dict[str, Any]:
    """Operations, test cases (requests sent) and failures (distinct, by check and
    operation) read from a run's ndjson events."""
    operations: set[str] = set()
    cases, failures = 0, set()
    lines = report.read_text(encoding="utf-8").splitlines() if report.exists() else []
    for line in lines:
        event = json.loads(line)
        for kind, body in event.items():
            if kind != "ScenarioFinished" or not isinstance(body, dict):
                continue
            label = str(body.get("recorder", {}).get("label", ""))
            operations.add(label)
            recorder = body.get("recorder", {})
            cases += len(recorder.get("cases", {}))
            for checks in recorder.get("checks", {}).values():
                for check in checks:
                    if str(check.get("status")).lower() == "failure":
                        failures.add((label, check.get("name"), check.get("failure_info", {})
                                      .get("failure", {}).get("title", "")))
    return {"operations": len(operations - {""}), "test_cases": cases,
            "failures": sorted({" | ".join(str(x) for x in f) for f in failures})}


def _serve(config: Config) -> tuple[uvicorn.Server, threading.Thread, str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(config, run_jobs=False),
                                           host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, 120.0)
    return server, thread, url


def _markdown(result: dict[str, Any]) -> str:
    lines = [f"# schemathesis over the service's API ({result['schemathesis']})", "",
             f"Command: `{result['command']}`", "",
             *([result["note"], ""] if result["note"] else []),
             f"Checks: {result['checks']}; phases {PHASES}; seed {result['seed']}, at most "
             f"{result['max_examples']} examples per operation and phase, "
             f"{result['workers']} workers, on {result['date']}. Total "
             f"{result['seconds']:.0f} s.", "",
             "| run | operations | test cases | failures | exit | seconds |",
             "|---|---:|---:|---:|---:|---:|"]
    for run in result["runs"]:
        lines.append(f"| {run['name']} | {run['operations']} | {run['test_cases']} | "
                     f"{len(run['failures'])} | {run['exit_code']} | {run['seconds']} |")
    failures = [f"- {run['name']}: {f}" for run in result["runs"] for f in run["failures"]]
    lines += ["", "Failures:" if failures else "No failures.", *failures, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--st", type=Path, default=ROOT / ".venv" / "schemathesis" / "bin" / "st")
    parser.add_argument("--max-examples", type=int, default=20)
    parser.add_argument("--seed", type=int, default=43)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--checks", default=CHECKS, help="schemathesis checks (all: every one, "
                        "the advisory positive/negative data ones included)")
    parser.add_argument("--note", default="", help="a line for the results (e.g. the commit)")
    parser.add_argument("--check", action="store_true", help="exit 1 on any failure")
    parser.add_argument("--name", default=NAME, help="results file name (benchmarks/results)")
    args = parser.parse_args(argv)
    version = subprocess.run([str(args.st), "--version"], capture_output=True, text=True,
                             check=True).stdout.strip()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        config, secrets = _service(Path(tmp))
        server, thread, url = _serve(config)
        try:
            runs = [{"name": name, **_schemathesis(args.st, url, secret, filters, args,
                                                   Path(tmp) / f"run{n}.ndjson")}
                    for n, (name, secret, filters) in enumerate(_runs(url, secrets))]
        finally:
            server.should_exit = True
            thread.join(60.0)
    result = {"schemathesis": version, "checks": args.checks, "note": args.note,
              "seed": args.seed, "max_examples": args.max_examples,
              "workers": args.workers, "date": time.strftime("%Y-%m-%d"),
              "command": shlex.join(["python", "benchmarks/bench_schemathesis.py",
                                     *(argv if argv is not None else sys.argv[1:])]),
              "seconds": round(time.monotonic() - started, 1), "runs": runs}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{args.name}.md").write_text(_markdown(result))
    print(_markdown(result))
    failed = [r for r in runs if r["failures"] or r["exit_code"] != 0]
    for run in failed:
        print(f"--- {run['name']} ---\n{run['output_tail']}", file=sys.stderr)
    return 1 if failed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
