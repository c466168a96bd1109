"""How long the default test suite takes (issue 44, item 6): wall time and the sum of every
test's durations, measured on a fresh clone of a revision, as ``.ci/run`` step 3 runs it.

The revision (``--rev``, default HEAD) is cloned into an empty temporary folder and the
default suite runs there with this checkout's venv, the clone's ``src`` first on the path,
``CI`` and ``MEDVERIFY_DATA`` unset (no data beside the clone: the data tests skip, as for a
new user) unless ``--with-data`` names the data folder::

    .venv/bin/pytest -q -n 2 --dist loadfile -p no:cacheprovider --durations=0

The machine may be shared: the wall time moves with other people's work, so the sum of the
per-test durations (setup + call + teardown, from ``--durations=0``) and the 1-minute load
average before and after are recorded beside it. Each run is stored under ``--label``
(default: the revision's short hash) in benchmarks/results/test_suite.json, so a "before"
and an "after" run can be compared; test_suite.md is rendered from the JSON::

    .venv/bin/python benchmarks/bench_test_suite.py --rev 9d3b798 --label before
    .venv/bin/python benchmarks/bench_test_suite.py --label after
    .venv/bin/python benchmarks/bench_test_suite.py --render

``--tests PATH...`` runs only those files (with ``-n 2 --dist loadfile`` still), so that the
files a change touched can be timed at both revisions, alternately, in a few minutes.
``--log FILE`` keeps pytest's whole output (every test's duration; benchmarks/results/
test_suite_logs/ holds those of the recorded runs, gzipped), and ``--reparse FILE --label
NAME`` recounts a recorded run's durations from such a file (e.g. the sum of the slowest
60 tests, added after the run) without running anything.

``--collect N --rev A --against B`` times what each xdist worker does before its first test,
``pytest --collect-only`` (imports, assertion rewriting, collection), N times in fresh clones
of both revisions, alternately, as CPU and wall seconds (benchmarks/results/
test_suite_collect.json and .md); ``--env KEY=VALUE`` sets a variable for those runs::

    .venv/bin/python benchmarks/bench_test_suite.py --collect 3 --rev 440e820 --against HEAD
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PYTEST = ["-q", "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider", "--durations=0"]
COLLECT = ["--collect-only", "-q", "-p", "no:cacheprovider"]
SLOWEST = 15  # tests listed in the results
TOP = 60  # the slowest tests whose durations are summed (the brief's --durations=60)
DURATION = re.compile(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)")
SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")


def parse(output: str) -> dict[str, Any]:
    """Per-test durations (setup + call + teardown summed) and the outcome counts of a
    ``pytest --durations=0`` output."""
    per_test: Counter[str] = Counter()
    per_phase: Counter[str] = Counter()
    for line in output.splitlines():
        found = DURATION.match(line.strip())
        if found:
            seconds, phase, test = float(found[1]), found[2], found[3]
            per_test[test] += seconds
            per_phase[phase] += seconds
    last = next((line for line in reversed(output.splitlines()) if " in " in line
                 and SUMMARY.search(line)), "")
    counts = {word.rstrip("s") if word.startswith("error") else word: int(n)
              for n, word in SUMMARY.findall(last)}
    per_file: Counter[str] = Counter()
    for test, seconds in per_test.items():
        per_file[test.split("::")[0]] += seconds
    failed = [line.split()[1] for line in output.splitlines()
              if line.startswith(("FAILED ", "ERROR ")) and len(line.split()) > 1]
    return {
        "counts": counts, "failed": failed,
        "durations_sum_s": round(sum(per_phase.values()), 1),
        "durations_by_phase_s": {k: round(v, 1) for k, v in sorted(per_phase.items())},
        f"durations_top{TOP}_s": round(sum(s for _, s in per_test.most_common(TOP)), 1),
        "slowest_tests": [{"test": t, "s": round(s, 2)}
                          for t, s in per_test.most_common(SLOWEST)],
        "slowest_files": [{"file": f, "s": round(s, 2)}
                          for f, s in per_file.most_common(SLOWEST)],
    }


def _clone(rev: str, tmp: str) -> tuple[Path, str]:
    """A fresh clone of ``rev`` under ``tmp`` and its short commit hash."""
    clone = Path(tmp) / "medverify"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", rev], check=True)
    commit = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=True).stdout.strip()
    return clone, commit


def _env(clone: Path, data: Path | None) -> dict[str, str]:
    """The suite's environment: the clone's src first (then this checkout's benchmarks/, for
    the timeline plugin), CI unset, data only where named."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "MEDVERIFY_DATA")}
    env["PYTHONPATH"] = os.pathsep.join([str(clone / "src"), str(ROOT / "benchmarks")])
    if data is not None:
        env["MEDVERIFY_DATA"] = str(data.resolve())
    return env


def run_suite(rev: str, data: Path | None, timeout_s: float,
              tests: list[str] | None = None, log: Path | None = None) -> dict[str, Any]:
    """The default suite (or only ``tests``) on a fresh clone of ``rev``: its parsed output
    and wall time."""
    with tempfile.TemporaryDirectory(prefix="bench-test-suite-") as tmp:
        clone, commit = _clone(rev, tmp)
        timeline = Path(tmp) / "timeline"
        timeline.mkdir()
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        done = subprocess.run([str(ROOT / ".venv" / "bin" / "pytest"), *PYTEST,
                               "-p", "suite_timeline", *(tests or [])], cwd=clone,
                              env={**_env(clone, data), "SUITE_TIMELINE_DIR": str(timeline)},
                              capture_output=True, text=True, timeout=timeout_s, check=False)
        wall = time.perf_counter() - started
        phases = timeline_phases(timeline)
    if log is not None:
        log.write_text(done.stdout + done.stderr)
    result = parse(done.stdout + done.stderr)
    result.update({"rev": rev, "commit": commit, "exit_code": done.returncode, **phases,
                   "tests": tests or "the default suite",
                   "wall_s": round(wall, 1), "data": str(data) if data else None,
                   "load_average_before": round(load_before, 2),
                   "load_average_after": round(os.getloadavg()[0], 2),
                   "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                 time.gmtime())})
    return result


def timeline_phases(folder: Path) -> dict[str, Any]:
    """Seconds from the controller's start: when the workers finished collecting and their
    last tests, and the wait from the last test to the controller's summary (the workers'
    exit); empty when the plugin wrote nothing (e.g. the run crashed)."""
    try:
        controller = json.loads((folder / "controller.json").read_text())
        workers = [json.loads(p.read_text()) for p in sorted(folder.glob("gw*.json"))]
        start = controller["start"]
        last = max(w["last_test"] for w in workers)
        return {"collected_s": round(max(w["collected"] for w in workers) - start, 1),
                "last_test_s": round(last - start, 1),
                "exit_wait_s": round(controller["summary"] - last, 1)}
    except (OSError, KeyError, ValueError):
        return {}


def _collect_once(clone: Path, env: dict[str, str]) -> dict[str, Any]:
    """One ``pytest --collect-only`` in ``clone``: what each xdist worker does before its first
    test. CPU seconds (user + system of the child) move less with the machine's load than
    the wall time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run([str(ROOT / ".venv" / "bin" / "pytest"), *COLLECT], cwd=clone,
                          env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    last = (done.stdout.strip().splitlines() or [""])[-1]
    return {"cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "load_average": round(load, 2),
            "exit_code": done.returncode, "summary": last}


def run_collect(revs: list[str], repeats: int, extra_env: dict[str, str]) -> dict[str, Any]:
    """``repeats`` collections of each revision's fresh clone, the revisions alternating (so
    that load hits them alike); ``extra_env`` is set for every run (e.g.
    ``PYTHONDONTWRITEBYTECODE=`` to let pytest cache rewritten test modules: the first run of
    a clone is then cold and the later ones warm)."""
    with tempfile.TemporaryDirectory(prefix="bench-test-collect-") as tmp:
        clones = [_clone(rev, f"{tmp}/{i}") for i, rev in enumerate(revs)]
        runs: list[list[dict[str, Any]]] = [[] for _ in revs]
        for _ in range(repeats):
            for (clone, _commit), out in zip(clones, runs, strict=True):
                out.append(_collect_once(clone, {**_env(clone, None), **extra_env}))
    return {"env": extra_env, "repeats": repeats, "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "revs": {f"{rev} ({commit})": {
                "runs": out,
                "cpu_s_median": round(statistics.median(r["cpu_s"] for r in out), 2),
                "wall_s_median": round(statistics.median(r["wall_s"] for r in out), 2)}
                for rev, (_clone_path, commit), out in zip(revs, clones, runs, strict=True)}}


def render_collect(records: dict[str, dict[str, Any]]) -> str:
    """test_suite_collect.md: each comparison's runs, CPU and wall seconds."""
    lines = ["# Collection of the default suite, per xdist worker (issue 44)", "",
             f"Each run: `pytest {' '.join(COLLECT)}` in a fresh clone of the revision (the "
             "work each of the two workers does before its first test), this checkout's "
             "venv, `CI` and `MEDVERIFY_DATA` unset; the revisions alternate. CPU s is the "
             "child's user + system time, less exposed to the shared machine's load than "
             "the wall time. Command: `.venv/bin/python benchmarks/bench_test_suite.py "
             "--collect N --rev A --against B [--env K=V] --label NAME`.", ""]
    for label, rec in records.items():
        env = " ".join(f"`{k}={v}`" for k, v in rec["env"].items()) or "none"
        lines += [f"## {label} ({rec['date']}; extra environment: {env})", "",
                  "| revision | CPU s, each run | median CPU s | median wall s | load |",
                  "|---|---|---|---|---|"]
        for rev, r in rec["revs"].items():
            cpu = ", ".join(str(x["cpu_s"]) for x in r["runs"])
            load = ", ".join(str(x["load_average"]) for x in r["runs"])
            lines.append(f"| {rev} | {cpu} | {r['cpu_s_median']:.2f} | {r['wall_s_median']:.2f} | "
                         f"{load} |")
        if rec.get("note"):
            lines += ["", rec["note"]]
        lines.append("")
    return "\n".join(lines)


def _read_log(path: Path) -> str:
    """A saved pytest output, plain or gzipped."""
    if path.suffix == ".gz":
        import gzip

        return gzip.decompress(path.read_bytes()).decode("utf-8")
    return path.read_text("utf-8")


def render(runs: dict[str, dict[str, Any]]) -> str:
    lines = ["# The default test suite: wall time and summed durations (issue 44)", "",
             "Each run: a fresh `git clone` of the revision, this checkout's venv, "
             f"`pytest {' '.join(PYTEST)}`, `CI` and `MEDVERIFY_DATA` unset unless a data "
             "folder is named (then the data tests run too). The machine is shared with "
             "other jobs: the 1-minute load average is given before and after; the sum of "
             "the per-test durations (setup + call + teardown) moves less with load than "
             "the wall time but still moves.", "",
             "Collected, last test: seconds from the start when the workers had collected "
             "and finished their last test; exit wait: from that last test to the "
             "controller's summary, i.e. the workers' exit (`benchmarks/suite_timeline.py`; "
             "'-' for runs before it).", "",
             f"| run | commit | wall s | collected | last test | exit wait | durations sum s "
             f"| slowest {TOP} sum s | passed | skipped | failed | exit | load before -> after "
             "| date |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, r in runs.items():
        c = r["counts"]
        lines.append(f"| {label} | {r['commit']} | {r['wall_s']} | "
                     f"{r.get('collected_s', '-')} | {r.get('last_test_s', '-')} | "
                     f"{r.get('exit_wait_s', '-')} | {r['durations_sum_s']} | "
                     f"{r.get(f'durations_top{TOP}_s', '-')} | "
                     f"{c.get('passed', 0)} | {c.get('skipped', 0)} | "
                     f"{c.get('failed', 0) + c.get('error', 0)} | {r['exit_code']} | "
                     f"{r['load_average_before']} -> {r['load_average_after']} | {r['date']} |")
    for label, r in runs.items():
        if r.get("tests", "the default suite") != "the default suite":
            lines += ["", f"Run {label}: only {', '.join(f'`{t}`' for t in r['tests'])}."]
        if r.get("note"):
            lines += ["", f"Run {label}: {r['note']}"]
    for label, r in runs.items():
        lines += ["", f"## Slowest {SLOWEST} tests, {label} ({r['commit']})", "",
                  "| s | test |", "|---|---|"]
        lines += [f"| {t['s']} | `{t['test']}` |" for t in r["slowest_tests"]]
    lines += ["", "Command: `.venv/bin/python benchmarks/bench_test_suite.py [--rev REV] "
              "[--label NAME] [--with-data DIR]`.", ""]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", default="HEAD", help="the revision to clone and test")
    parser.add_argument("--label", help="the run's name in the results (default: its commit)")
    parser.add_argument("--with-data", type=Path, metavar="DIR",
                        help="MEDVERIFY_DATA for the run (default: unset, data tests skip)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds for the suite")
    parser.add_argument("--tests", nargs="+", metavar="PATH",
                        help="only these test files (the same files at both revisions: a "
                        "before/after comparison of what changed, less exposed to load)")
    parser.add_argument("--log", type=Path, metavar="FILE",
                        help="also write pytest's whole output there (every duration)")
    parser.add_argument("--reparse", type=Path, metavar="FILE",
                        help="recount --label's durations from its saved --log output (the "
                        "wall time and load stay as measured)")
    parser.add_argument("--note", help="a note on --label's run, printed under the table "
                        "(e.g. what else ran on the machine, what failed and why)")
    parser.add_argument("--render", action="store_true", help="test_suite.md from the JSON")
    parser.add_argument("--out", default="test_suite", help="results name (.json and .md)")
    parser.add_argument("--collect", type=int, metavar="N",
                        help="time N collections (--collect-only) of --rev's and --against's "
                        "fresh clones instead of the suite; results in test_suite_collect")
    parser.add_argument("--against", metavar="REV", help="with --collect: the other revision")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="with --collect: set for every run (repeatable)")
    return parser


def _collect_main(args: argparse.Namespace) -> int:
    out = RESULTS / "test_suite_collect.json"
    records: dict[str, dict[str, Any]] = json.loads(out.read_text()) if out.exists() else {}
    if args.note:
        records[args.label]["note"] = args.note
    elif not args.render:
        revs = [args.rev, *([args.against] if args.against else [])]
        extra = dict(item.split("=", 1) for item in args.env)
        record = run_collect(revs, args.collect, extra)
        records[args.label or "/".join(revs)] = record
        print(json.dumps({rev: (r["cpu_s_median"], r["wall_s_median"])
                          for rev, r in record["revs"].items()}))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(records, indent=1) + "\n")
    (RESULTS / "test_suite_collect.md").write_text(render_collect(records))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.collect or args.out == "test_suite_collect":
        return _collect_main(args)
    out = RESULTS / f"{args.out}.json"
    runs: dict[str, dict[str, Any]] = json.loads(out.read_text()) if out.exists() else {}
    if args.reparse or args.note:
        if args.reparse:
            runs[args.label].update(parse(_read_log(args.reparse)))
        if args.note:
            runs[args.label]["note"] = args.note
        out.write_text(json.dumps(runs, indent=1) + "\n")
    elif not args.render:
        result = run_suite(args.rev, args.with_data, args.timeout, args.tests,
                           args.log)
        runs[args.label or result["commit"]] = result
        RESULTS.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(runs, indent=1) + "\n")
        print(json.dumps({k: result.get(k) for k in (
            "commit", "wall_s", "collected_s", "last_test_s", "exit_wait_s", "durations_sum_s",
            "counts", "exit_code")}))
    (RESULTS / f"{args.out}.md").write_text(render(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
