"""Issue 31's summary targets: complete, never falsely summarised, dates as the registry gives
them, measured on the shipped sample records and on a synthetic set with variants.

    .venv/bin/python benchmarks/bench_trials_summaries.py [--n 2000] [--seed 0]
        [--before /tmp/wt-before]

Curates every record (the 7 samples in ../shared/data/raw/clinicaltrials, or
$MEDVERIFY_TRIALS_SAMPLES; and ``--n`` synthetic records from
``synthetic_studies(n, seed, variants=True)``: every status and date type, markdown escapes,
long lists, many serious events with ties, baseline) and runs the checks of
``medverify.trials.exactness`` on each summary. Targets, each 0:

* lists cut without a note (``cut_lists``);
* serious adverse events missing, as terms or from their group's sentence
  (``missing_serious_events``);
* estimated (or anticipated) dates written as past, and untyped dates written as past
  (``dates_as_actual``);
* numbers not found in the fields their sentence points to, and other exactness faults
  (``sentence_problems``: pointers naming no filled field, a pointed value not in its
  sentence, note counts that do not fit).

Also counted: what the checks looked at (sentences, numbers, pointers, notes, serious
events, estimated dates) and summary lengths (characters per summary and per section).
``--before DIR``: the same records curated by another checkout's ``src`` (a child process
with that ``src`` first on the path), checked with this checkout's checks, to show what the
checks find there. Writes benchmarks/results/trials_summaries.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TARGETS = ("cut", "serious_missing", "estimated_as_actual", "untyped_as_actual", "numbers",
           "inexact_other")


def load_records(n: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    sys.path.insert(0, str(ROOT / "src"))
    from medverify.trials.synthetic import default_samples_dir, load_samples, synthetic_studies

    samples = load_samples(default_samples_dir())
    return {"samples": samples,
            "synthetic": list(synthetic_studies(n, seed, samples, variants=True))}


def looked_at(study: dict[str, Any], summary: Any) -> Counter[str]:
    """What the checks of one record covered."""
    from medverify.trials.exactness import is_note, numbers

    seen: Counter[str] = Counter()
    for section in summary.sections:
        for sentence in section.sentences:
            seen["sentences"] += 1
            seen["numbers"] += len(numbers(sentence.text))
            seen["pointers"] += len(sentence.pointers)
            seen["notes"] += is_note(study, sentence)
    status = study["protocolSection"].get("statusModule") or {}
    for key in ("startDateStruct", "primaryCompletionDateStruct", "completionDateStruct"):
        kind = (status.get(key) or {}).get("type", "untyped") if key in status else None
        if kind is not None:
            seen[f"dates {kind.lower()}"] += 1
    events = ((study.get("resultsSection") or {}).get("adverseEventsModule") or {})
    for event in events.get("seriousEvents") or []:
        seen["serious events"] += 1
        seen["serious (event, group) pairs affected"] += sum(
            1 for s in event.get("stats") or [] if isinstance(s.get("numAffected"), int)
            and s["numAffected"] > 0)
    return seen


def check_set(studies: list[dict[str, Any]], summaries: list[Any]) -> dict[str, Any]:
    """Run the checks on each (record, summary); counts, lengths and a few examples."""
    from medverify.trials.exactness import audit

    faults: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    lengths, sections = [], Counter()
    for study, summary in zip(studies, summaries, strict=True):
        found = audit(study, summary)
        found["numbers"] = [p for p in found["inexact"] if "number " in p]
        found["inexact_other"] = [p for p in found["inexact"] if "number " not in p]
        for key in TARGETS:
            faults[key] += len(found[key])
            for problem in found[key][:2]:
                if len(examples.setdefault(key, [])) < 4:
                    examples[key].append(f"{summary.nct_id}: {problem[:220]}")
        seen += looked_at(study, summary)
        lengths.append(sum(len(s.text) + 1 for sec in summary.sections for s in sec.sentences))
        for sec in summary.sections:
            size = sum(len(s.text) + 1 for s in sec.sentences)
            sections[sec.name] = max(sections[sec.name], size)
    return {"records": len(studies),
            "with_results": sum(bool(s.get("resultsSection")) for s in studies),
            "faults": {k: faults[k] for k in TARGETS}, "looked_at": dict(sorted(seen.items())),
            "examples": examples,
            "summary_chars": {"mean": round(statistics.fmean(lengths)),
                              "median": round(statistics.median(lengths)),
                              "max": max(lengths)},
            "largest_section_chars": dict(sections.most_common(5))}


def curate_here(studies: list[dict[str, Any]]) -> tuple[list[Any], float]:
    from medverify.trials.curate import curate

    start = time.process_time()
    summaries = [curate(study) for study in studies]
    return summaries, time.process_time() - start


def curate_before(before: Path, studies: list[dict[str, Any]]) -> tuple[list[Any], float]:
    """The same records curated by another checkout (a child process)."""
    from medverify.trials.summary import TrialSummary

    with tempfile.TemporaryDirectory(prefix="trials-summaries-") as tmp:
        source, out = Path(tmp) / "records.jsonl", Path(tmp) / "summaries.jsonl"
        source.write_text("".join(json.dumps(s) + "\n" for s in studies), "utf-8")
        env = {**os.environ, "PYTHONPATH": str(before / "src")}
        done = subprocess.run([sys.executable, __file__, "--child", str(source), str(out)],
                              env=env, cwd=before, check=True, capture_output=True, text=True)
        seconds = float(done.stdout.strip().splitlines()[-1])
        rows = out.read_text("utf-8").splitlines()
    return [TrialSummary.model_validate_json(row) for row in rows], seconds


def child(source: str, out: str) -> None:
    """Curate the records of ``source`` with whatever ``medverify`` is first on the path."""
    from medverify.trials.curate import curate

    studies = [json.loads(line) for line in Path(source).read_text("utf-8").splitlines()]
    start = time.process_time()
    summaries = [curate(study) for study in studies]
    seconds = time.process_time() - start
    Path(out).write_text("".join(s.model_dump_json() + "\n" for s in summaries), "utf-8")
    print(seconds)


def run(args: argparse.Namespace) -> dict[str, Any]:
    records = load_records(args.n, args.seed)
    result: dict[str, Any] = {
        "command": f"benchmarks/bench_trials_summaries.py --n {args.n} --seed {args.seed}"
                   + (f" --before {args.before}" if args.before else ""),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs visible, "
                   f"Python {platform.python_version()}",
        "sets": {}}
    for name, studies in records.items():
        summaries, seconds = curate_here(studies)
        entry = check_set(studies, summaries)
        entry["curate_ms_per_record"] = round(1000 * seconds / len(studies), 2)
        if args.before:
            old, old_seconds = curate_before(Path(args.before), studies)
            entry["before"] = {**check_set(studies, old),
                               "curate_ms_per_record": round(1000 * old_seconds / len(studies),
                                                             2)}
        result["sets"][name] = entry
    result["targets_met"] = all(v == 0 for s in result["sets"].values()
                                for v in s["faults"].values())
    return result


LABELS = {"cut": "lists cut without a note", "serious_missing":
          "serious adverse events missing (terms, or from their group's sentence)",
          "estimated_as_actual": "estimated/anticipated dates written as past",
          "untyped_as_actual": "untyped dates written as past (or not said to be untyped)",
          "numbers": "numbers not in the fields their sentence points to",
          "inexact_other": "other exactness faults (pointer naming no filled field, pointed "
                           "value not in its sentence, note counts)"}


def markdown(result: dict[str, Any]) -> str:
    sets = result["sets"]
    names = list(sets)
    has_before = all("before" in sets[n] for n in names)
    head = " | ".join(f"{n} ({sets[n]['records']} records)" for n in names)
    before = " | ".join(f"{n}, before" for n in names) if has_before else ""
    lines = ["# Trial summaries: issue 31's targets (`benchmarks/bench_trials_summaries.py`)", "",
             f"Command: `{result['command']}`. Machine: {result['machine']}. Checks: "
             "`medverify.trials.exactness`. Target: 0 in every row.", "",
             f"| fault | {head} |" + (f" {before} |" if before else ""),
             "|---|" + "---|" * (len(names) * (2 if has_before else 1))]
    for key, label in LABELS.items():
        row = [str(sets[n]["faults"][key]) for n in names]
        if has_before:
            row += [str(sets[n]["before"]["faults"][key]) for n in names]
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    lines += ["", f"Targets met: **{'yes' if result['targets_met'] else 'NO'}**.", ""]
    if has_before:
        lines += ["'before': the same records curated by the checkout given with `--before`, "
                  "checked with these checks. Its 'other exactness faults' are nearly all "
                  "registry markdown escapes copied verbatim (the checks compare with the "
                  "unescaped field); its numbers were already exact.", ""]
    lines += ["What the checks looked at (dates: by the registry's type; serious pairs: "
              "(term, group) with at least one participant affected):", ""]
    keys = sorted({k for n in names for k in sets[n]["looked_at"]})
    lines += [f"| | {' | '.join(names)} |", "|---|" + "---|" * len(names)]
    lines += [f"| {k} | " + " | ".join(str(sets[n]["looked_at"].get(k, 0)) for n in names)
              + " |" for k in keys]
    lines += ["", "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label, get in (("records with results", lambda e: e["with_results"]),
                       ("summary characters, mean / median / max", lambda e: " / ".join(
                           str(e["summary_chars"][k]) for k in ("mean", "median", "max"))),
                       ("curation CPU ms per record", lambda e: e["curate_ms_per_record"])):
        lines.append(f"| {label} | " + " | ".join(str(get(sets[n])) for n in names) + " |")
        if has_before:
            lines.append(f"| {label}, before | " + " | ".join(
                str(get(sets[n]["before"])) for n in names) + " |")
    lines += ["", "Largest sections (characters):", ""]
    for n in names:
        largest = ", ".join(f"{k} {v}" for k, v in sets[n]["largest_section_chars"].items())
        lines.append(f"- {n}: {largest}")
    examples = [(n, k, x) for n in names for s in ([sets[n].get("before", {})] if has_before
                                                   else []) for k, xs in
                s.get("examples", {}).items() for x in xs[:2]]
    if examples:
        lines += ["", "Examples of what the checks find in the summaries before:", ""]
        lines += [f"- {n}, {k}: {x}" for n, k, x in examples]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--before", help="another checkout whose src to compare with")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    result = run(args)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "trials_summaries.json").write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    (RESULTS / "trials_summaries.md").write_text(markdown(result), "utf-8")
    print(markdown(result))


if __name__ == "__main__":
    main()
