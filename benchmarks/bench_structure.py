"""Structure before and after a refactor: same numbers, fewer cycles, smaller modules.

Checks out ``--before`` (default: the commit before issue 29's restructuring; issue 14's
was c7c1933) and ``--after`` (default HEAD) as git worktrees and measures both:

- module sizes (the largest modules, in lines) and the unit import graph
  (``scripts/import_graph.py`` of the working tree, run over each tree's ``src``): cycles,
  strongly connected components, layer violations;
- the shape rules (``scripts/shape.py`` of the working tree over each tree's ``src``):
  modules over the limit (500 lines) and over 450, functions over the limit (50) and over
  40 lines, circles of file imports;
- duplicated blocks (the ``duplicates`` tool, when it is on PATH: pairs over ``src``);
- behaviour: ``medverify eval pairs`` on Check-COVID dev (needs ``../shared/data``) and an
  offline benchmark study (``bench_study.py --questions 60 --judge word --selection
  lexical``), compared field by field with timings left out: the numbers must be equal;
- pipeline overhead (``bench_pipeline.py``) and the service's added latency
  (``bench_service.py overhead --requests 150``; this checkout's copy in both trees: the
  copy at 4b22712 numbered its claims, which the exact checks of issue 27 refuse), run
  alternately ``--repeats`` times per tree in one job (before first in even repeats, after
  first in odd ones), so the ratios are measured under the same load.

    .venv/bin/python benchmarks/bench_structure.py [--before REV] [--after REV] [--repeats 2]

Writes benchmarks/results/structure.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAIRS = data_dir() / "pairs" / "checkcovid_dev.jsonl"
BEFORE = "4b22712"
TIMING = {"wall_s", "seconds", "pairs_per_second", "peak_rss_mb", "phases_s",
          "share_outside_model_calls", "model_busy_s", "created_at", "machine", "python",
          "command", "medverify_version"}

sys.path.insert(0, str(ROOT / "scripts"))
import import_graph as ig  # noqa: E402
import shape as sh  # noqa: E402


def run(tree: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, *args], cwd=tree, env=env, text=True,
                          capture_output=True, **kwargs)
    if done.returncode:
        raise SystemExit(f"{' '.join(args)} failed in {tree}:\n{done.stderr[-3000:]}")
    return done


def current_script(tree: Path, name: str) -> str:
    """This checkout's ``benchmarks/NAME`` copied into ``tree`` (so both trees are measured
    by the same benchmark), with the modules it is split into (``NAME_*.py``, under their
    own names), reading ``medverify.checker`` as ``medverify.pipeline`` in a tree from
    before the rename."""
    stem = name.removesuffix(".py")
    helpers = sorted((ROOT / "benchmarks").glob(f"{stem}_*.py"))
    for path in [ROOT / "benchmarks" / name, *helpers]:
        text = path.read_text("utf-8")
        if not (tree / "src" / "medverify" / "checker.py").exists():
            text = text.replace("from medverify.checker import",
                                "from medverify.pipeline import")
        target = tree / "benchmarks" / (f"now_{name}" if path.name == name else path.name)
        target.write_text(text, "utf-8")
    return str((tree / "benchmarks" / f"now_{name}").relative_to(tree))


def untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out += differences(a.get(key), b.get(key), f"{path}/{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"]


def shape(tree: Path) -> dict[str, Any]:
    src = tree / "src"
    package = src / "medverify"
    sizes = {str(p.relative_to(package)): len(p.read_text("utf-8").splitlines())
             for p in package.rglob("*.py")}
    edges = ig.imports(src)
    graph = ig.graph(edges)
    out: dict[str, Any] = {
        "modules": len(sizes), "lines": sum(sizes.values()),
        "largest": dict(sorted(sizes.items(), key=lambda kv: -kv[1])[:6]),
        "unit_edges": sum(len(v) for v in graph.values()),
        "cycles": sum(1 for _ in ig.cycles(graph)),
        "components": [c for c in ig.components(graph) if len(c) > 1],
        "layer_violations": len(ig.violations(edges)),
        # units the layer table (today's) does not place count as the top layer, so an
        # older tree's violations are those of its unplaced units, not of its own table
        "units_not_in_table": ig.unplaced(ig.units(src)),
    }
    summary = sh.summary(src)
    out["modules_over_limit"] = {r["where"]: r["lines"]
                                 for r in summary["modules_over_limit"]}
    out["modules_over_450"] = summary["modules_over_450"]
    out["functions_over_limit"] = {r["where"]: r["lines"]
                                   for r in summary["functions_over_limit"]}
    out["functions_over_40"] = summary["functions_over_40"]
    out["file_circles"] = summary["file_circles"]
    if shutil.which("duplicates"):
        line = subprocess.run(["duplicates", "--repo", str(src), "--most", "1", "--seconds",
                               "120"], text=True, capture_output=True).stdout.split("\n")[0]
        out["duplicates"] = line
    return out


def behaviour(tree: Path, scratch: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if PAIRS.is_file():
        target = scratch / f"pairs-{tree.name}.json"
        run(tree, "-m", "medverify", "eval", "pairs", str(PAIRS), "--json", str(target))
        out["eval_pairs"] = json.loads(target.read_text("utf-8"))
    run(tree, "benchmarks/bench_study.py", "--questions", "60", "--judge", "word",
        "--selection", "lexical")
    study = tree / "benchmarks" / "results" / "bench_study_word_lexical.json"
    out["study"] = json.loads(study.read_text("utf-8"))
    return out


def overhead(tree: Path, scratch: Path, n: int) -> dict[str, float]:
    target = scratch / f"pipeline-{tree.name}-{n}.json"
    run(tree, "benchmarks/bench_pipeline.py", "--out", str(target))
    data = json.loads(target.read_text("utf-8"))
    service_dir = scratch / f"service-{tree.name}-{n}"
    run(tree, current_script(tree, "bench_service.py"), "overhead", "--requests", "150",
        "--out-dir", str(service_dir))
    service = json.loads((service_dir / "service.json").read_text("utf-8"))["overhead"]
    return {"ms_per_claim": data["overhead"]["ms_per_claim_beyond_retrieval"],
            "fanout_ratio": data["fanout"]["ratio"],
            "service_added_p50_ms": service["added_p50_ms"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    revs = {name: subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, text=True,
                                 capture_output=True, check=True).stdout.strip()
            for name, rev in (("before", args.before), ("after", args.after))}
    with tempfile.TemporaryDirectory(prefix="mv-structure-") as tmp:
        scratch = Path(tmp)
        trees = {}
        for name, rev in revs.items():
            trees[name] = scratch / name
            subprocess.run(["git", "worktree", "add", "--detach", "-q", str(trees[name]), rev],
                           cwd=ROOT, check=True)
        try:
            result = measure(trees, scratch, args.repeats, revs)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
    write(result)


def measure(trees: dict[str, Path], scratch: Path, repeats: int,
            revs: dict[str, str]) -> dict[str, Any]:
    shapes = {name: shape(tree) for name, tree in trees.items()}
    done = {name: behaviour(tree, scratch) for name, tree in trees.items()}
    same = {what: differences(untimed(done["before"][what]), untimed(done["after"][what]))
            for what in done["before"]}
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for n in range(repeats):  # the order alternates, so neither tree always runs second
        for name, tree in (list(trees.items()) if n % 2 == 0 else list(trees.items())[::-1]):
            runs[name].append(overhead(tree, scratch, n))
    median = {name: statistics.median(r["ms_per_claim"] for r in rs) for name, rs in runs.items()}
    service = {name: statistics.median(r["service_added_p50_ms"] for r in rs)
               for name, rs in runs.items()}
    return {
        "machine": {"python": platform.python_version(), "cpu": platform.machine()},
        "revisions": revs, "shape": shapes, "behaviour_differences": same,
        "eval_pairs_macro_f1": {n: d["eval_pairs"]["files"][0]["macro_f1"]
                                for n, d in done.items() if "eval_pairs" in d},
        "study_pairs_judged": {n: d["study"]["pairs_judged"] for n, d in done.items()},
        "pipeline_runs": runs, "pipeline_ms_per_claim_median": median,
        "pipeline_overhead_ratio": median["after"] / median["before"],
        "service_added_p50_ms_median": service,
        "service_overhead_ratio": service["after"] / service["before"],
    }


def write(result: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "structure.json").write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    b, a = result["shape"]["before"], result["shape"]["after"]
    rows = [
        ("modules / lines", f"{b['modules']} / {b['lines']:,}", f"{a['modules']} / {a['lines']:,}"),
        ("largest modules", _largest(b), _largest(a)),
        ("unit import edges", b["unit_edges"], a["unit_edges"]),
        ("unit import cycles (simple)", b["cycles"], a["cycles"]),
        ("strongly connected groups", _groups(b), _groups(a)),
        ("layer violations (today's table)", _violations(b), _violations(a)),
    ]
    rows += [
        (f"modules over {sh.MAX_MODULE_LINES} / over 450 lines",
         f"{len(b['modules_over_limit'])} / {b['modules_over_450']}",
         f"{len(a['modules_over_limit'])} / {a['modules_over_450']}"),
        (f"functions over {sh.MAX_FUNCTION_LINES} / over 40 lines",
         f"{len(b['functions_over_limit'])} / {b['functions_over_40']}",
         f"{len(a['functions_over_limit'])} / {a['functions_over_40']}"),
        ("longest functions", _longest(b), _longest(a)),
        ("circles of file imports", _circles(b), _circles(a)),
    ]
    if "duplicates" in b:
        rows.append(("duplicates over src", b["duplicates"], a["duplicates"]))
    runs = result["pipeline_runs"]
    rows.append(("pipeline overhead, ms/claim (runs)",
                 ", ".join(f"{r['ms_per_claim']:.3f}" for r in runs["before"]),
                 ", ".join(f"{r['ms_per_claim']:.3f}" for r in runs["after"])))
    rows.append(("service added p50, ms (runs)",
                 ", ".join(f"{r['service_added_p50_ms']:.2f}" for r in runs["before"]),
                 ", ".join(f"{r['service_added_p50_ms']:.2f}" for r in runs["after"])))
    lines = [
        f"# Structure before ({result['revisions']['before']}) and after "
        f"({result['revisions']['after']})", "",
        "`python benchmarks/bench_structure.py`", "",
        "| measure | before | after |", "|---|---|---|",
        *(f"| {m} | {x} | {y} |" for m, x, y in rows), "",
        f"Pipeline overhead ratio after/before (medians): "
        f"{result['pipeline_overhead_ratio']:.2f}; service added latency ratio after/before "
        f"(medians): {result['service_overhead_ratio']:.2f}.", "",
        "Behaviour (timings left out): " + "; ".join(
            f"{what}: {'identical' if not diff else f'{len(diff)} differences'}"
            for what, diff in result["behaviour_differences"].items()) + ".",
    ]
    for what, diff in result["behaviour_differences"].items():
        lines += [f"- {what}: {d}" for d in diff[:20]]
    (RESULTS / "structure.md").write_text("\n".join(lines) + "\n", "utf-8")
    print("\n".join(lines))


def _largest(shape: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in list(shape["largest"].items())[:3])


def _violations(shape: dict[str, Any]) -> str:
    unplaced = shape.get("units_not_in_table") or []
    return (f"{shape['layer_violations']} (units the table does not place: "
            f"{', '.join(unplaced)})" if unplaced else str(shape["layer_violations"]))


def _longest(shape: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in list(shape["functions_over_limit"].items())[:2]) or "-"


def _circles(shape: dict[str, Any]) -> str:
    return "; ".join("{" + ", ".join(c) + "}" for c in shape["file_circles"]) or "none"


def _groups(shape: dict[str, Any]) -> str:
    return "; ".join("{" + ", ".join(c) + "}" for c in shape["components"]) or "none"


if __name__ == "__main__":
    main()
