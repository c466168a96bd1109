"""Who reaches a clinician (issue 41): the demo answers and the README's metformin example
checked with the built-in judge, then decided by the default policy (v2: vetoes and unsure
clinical claims escalated within ``escalation_budget``) and, for comparison, by the v1
policy (``not_sure = "FLAG"``, no budget, no vetoed / not_sure_clinical rules) and by v1
with ``not_sure = "ESCALATE"``.

The judge runs once; each policy re-decides the same verdicts (``arbitrate_all``), so the
policies are compared on identical evidence. A planted error (the demo answers'
``meta["expected"]`` kinds other than "correct", and the 5000 mg dose) is *caught* when it is
ESCALATEd or a confident HALLUCINATION. The queue is every escalated claim of the run ranked
by review priority (:func:`medverify.arbitration.urgency`), as ``/review`` lists it.

Targets: every planted error caught, at most 30 % of the claims escalated, the 5000 mg claim
among the first 3 of the queue.

    .venv/bin/python benchmarks/bench_queue.py [--work DIR]

Writes benchmarks/results/queue.json and queue.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from medverify.arbitration import arbitrate_all, urgency
from medverify.checker import Checker
from medverify.config import ArbitrationPolicy
from medverify.demo import build_demo_kb, demo_answers, demo_config, expected_for
from medverify.kit import FlowKit
from medverify.records import Answer, Category, ClaimResult, Decision, Report

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README_EXAMPLE = Answer(
    id="readme-metformin", question="How is type 2 diabetes treated?",
    text="Metformin is first-line therapy for type 2 diabetes. Start with 5000 mg daily.",
    meta={"expected": [
        {"text": "Metformin is first-line therapy for type 2 diabetes.", "category": "FACT",
         "kind": "correct"},
        {"text": "Start with 5000 mg daily.", "category": "HALLUCINATION",
         "kind": "10x dose"}]})
_V1 = {"version": "v1", "vetoed": "FLAG", "not_sure_clinical": "FLAG", "escalation_budget": 1.0}
POLICIES = {
    "default (v2)": ArbitrationPolicy(),
    "v1 (not_sure FLAG)": ArbitrationPolicy(**_V1),
    "v1, not_sure ESCALATE": ArbitrationPolicy(**{**_V1, "not_sure": "ESCALATE",
                                                  "not_sure_clinical": "ESCALATE"}),
}


def kind_of(answer: Answer, result: ClaimResult) -> str | None:
    expectation = expected_for(answer, result.claim)
    return expectation.kind if expectation else None


def decided(reports: list[Report], policy: ArbitrationPolicy) -> list[dict[str, Any]]:
    rows = []
    for report in reports:
        for result in arbitrate_all(report.results, policy):
            assert result.arbitration is not None
            kind = kind_of(report.answer, result)
            rows.append({
                "answer": report.answer.id, "claim": result.claim.text,
                "original": getattr(result.claim, "original", None),
                "planted": kind not in (None, "correct"), "kind": kind,
                "category": result.category.value, "confident": result.confident,
                "decision": result.arbitration.decision.value, "rule": result.arbitration.rule,
                "clinical": result.arbitration.inputs.get("clinical"),
                "priority": urgency(result)})
    return rows


def measure(rows: list[dict[str, Any]]) -> dict[str, Any]:
    queue = sorted((r for r in rows if r["decision"] == Decision.ESCALATE.value),
                   key=lambda r: -r["priority"])
    planted = [r for r in rows if r["planted"]]
    caught = [r for r in planted if r["decision"] == Decision.ESCALATE.value
              or (r["category"] == Category.HALLUCINATION.value and r["confident"])]
    dose = next((i + 1 for i, r in enumerate(queue) if "5000 mg" in r["claim"]), None)
    return {"claims": len(rows), "escalated": len(queue),
            "escalated_share": round(len(queue) / max(len(rows), 1), 4),
            "planted": len(planted), "caught": len(caught),
            "missed": [r["claim"] for r in planted if r not in caught],
            "dose_rank": dose, "queue": [r["claim"] for r in queue],
            "not_sure": sum(r["confident"] is False for r in rows)}


def markdown(payload: dict[str, Any]) -> str:
    lines = ["# Who reaches a clinician: the demo answers and the README example (issue 41)",
             "", "`.venv/bin/python benchmarks/bench_queue.py` (demo KB, MiniLM, built-in "
             "judge, rules decomposer; one judging run, each policy decides the same "
             "verdicts).", "",
             "| policy | claims | not sure | escalated | share | planted errors caught | "
             "5000 mg claim's queue rank |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, m in payload["policies"].items():
        lines.append(f"| {name} | {m['claims']} | {m['not_sure']} | {m['escalated']} | "
                     f"{m['escalated_share']:.0%} | {m['caught']} of {m['planted']} | "
                     f"{m['dose_rank'] or 'not queued'} |")
    default = payload["policies"]["default (v2)"]
    lines += ["", "Missed under the default policy: "
              + ("none." if not default["missed"] else "; ".join(
                  f"“{c}”" for c in default["missed"])), "",
              "Every claim under the default policy:", "",
              "| claim | planted | category | sure | decision | rule | clinical | priority |",
              "|---|---|---|---|---|---|---|---:|"]
    for r in payload["rows"]:
        sure = {True: "yes", False: "not sure", None: "–"}[r["confident"]]
        lines.append(f"| {r['claim']} | {r['kind'] or '–'} | {r['category']} | {sure} | "
                     f"{r['decision']} | {r['rule']} | {r['clinical'] or '–'} | "
                     f"{r['priority']:.2f} |")
    lines += ["", "The default queue, in review order: "
              + " → ".join(f"“{c}”" for c in default["queue"])]
    return "\n".join(lines) + "\n"


def work_dir(doc: str | None, prefix: str) -> Path:
    """The ``--work`` folder of a demo-KB benchmark (a new temporary one by default)."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=None,
                        help="Folder for the demo KB (and the run store).")
    work = parser.parse_args().work or Path(tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    return work


def write_results(name: str, payload: dict[str, Any], text: str) -> None:
    """``benchmarks/results/<name>.json`` and ``.md``; the markdown is printed too."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=1) + "\n", "utf-8")
    (RESULTS / f"{name}.md").write_text(text, "utf-8")
    print(text)


def demo_reports(work: Path) -> list[Report]:
    """The demo answers and the README example checked on the demo KB built in ``work``."""
    kb, _ = build_demo_kb(work / "kb")
    with kb:
        checker = Checker.from_config(demo_config(work), kit=FlowKit(kb=kb))
        try:
            return asyncio.run(checker.run([*demo_answers(), README_EXAMPLE]))
        finally:
            asyncio.run(checker.aclose())


def main() -> None:
    work = work_dir(__doc__, "queue-")
    reports = demo_reports(work)
    policies = {name: measure(decided(reports, p)) for name, p in POLICIES.items()}
    payload = {"policies": policies, "rows": decided(reports, POLICIES["default (v2)"])}
    write_results("queue", payload, markdown(payload))


if __name__ == "__main__":
    main()
