"""Teaching that cannot spread (issue 41): after clinicians teach statements, are claims
that are *almost* those statements (another entity, number, dose count, population,
condition, direction, or the negation dropped) ever a confident FACT or an ACCEPT?

Design (recorded in the results):

* Knowledge base: the demo KB (``medverify.demo.build_demo_kb``: the MedQuAD sample
  documents the demo answers were written against plus the short sample documents; the
  default MiniLM embedder), built once under ``--work``.
* Taught statements: the 11 correct sentences of the demo answers, each checked once,
  queued, labelled FACT with a source URL by a simulated reviewer and taught
  (:func:`medverify.review.teach`: a ``clinician-review`` document in the KB); plus one
  HALLUCINATION label with a correction (the demo's "shingles vaccine ... for children under
  12" corrected to "... for people 60 and older"), the issue's second case.
* Near-miss claims: ``benchmarks/data/near_miss.jsonl``, 58 false claims written for this
  benchmark, each from one taught statement, with its kind. Each is checked as its own
  answer with the built-in judge, the rules decomposer and the default policy, before and
  after teaching (settling on, as the service runs).
* Also re-checked after teaching: the taught statements themselves, which must still settle
  (rule ``reviewed``, FACT, ACCEPT: issue 30's loop).

Target: 0 confident FACT and 0 ACCEPT among the near-miss claims after teaching.

The code before issue 41 on the same set (``near_miss_before_issue41.md``): this script run
from a worktree of commit 82bae42 with its ``src`` first on ``PYTHONPATH`` (the script and
``benchmarks/data/near_miss.jsonl`` copied in).

    .venv/bin/python benchmarks/bench_near_miss.py [--work DIR]

Writes benchmarks/results/near_miss.json and near_miss.md.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

from bench_queue import work_dir, write_results

from medverify.checker import Checker
from medverify.demo import build_demo_kb, demo_config
from medverify.kb import KnowledgeBase
from medverify.kit import FlowKit
from medverify.records import Answer, Decision, Report
from medverify.review import ReviewLabel, items_from_report, teach
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "near_miss.jsonl"
RESULTS = ROOT / "benchmarks" / "results"
CORRECTION = "CORRECTION:"
CORRECTED_CLAIM = ("The shingles vaccine is recommended for children under 12 who have never "
                   "had chickenpox.")
REVIEWER = "bench-reviewer"


def rows() -> list[dict[str, str]]:
    return [json.loads(line) for line in DATA.read_text("utf-8").splitlines() if line.strip()]


def check(checker: Checker, runs: RunStore, texts: list[str], tag: str) -> list[Report]:
    answers = [Answer(id=f"{tag}-{i}", text=t) for i, t in enumerate(texts)]
    return asyncio.run(checker.run(answers, store=runs, concurrency=2))


def outcome(report: Report) -> dict[str, Any]:
    """The claim's outcome (a near-miss claim is one sentence: its first result)."""
    if not report.results:
        return {"claim": report.answer.text, "category": "NONE", "confident": None,
                "decision": None, "rule": None}
    result = report.results[0]
    decided = result.arbitration
    return {"claim": result.claim.text, "category": result.category.value,
            "confident": result.confident, "not_sure": result.not_sure,
            "decision": decided.decision.value if decided else None,
            "rule": decided.rule if decided else None, "claims": len(report.results)}


def teach_all(checker: Checker, runs: RunStore, kb: KnowledgeBase,
              statements: list[str]) -> list[dict[str, Any]]:
    """Check, queue, label and teach each statement (FACT with a source; the correction case
    as HALLUCINATION with its correction)."""
    queue = ReviewStore(runs)
    taught = []
    plain = [s for s in statements if not s.startswith(CORRECTION)]
    corrections = [s.removeprefix(CORRECTION) for s in statements if s.startswith(CORRECTION)]
    texts = plain + [CORRECTED_CLAIM] * len(corrections)
    for n, report in enumerate(check(checker, runs, texts, "teach")):
        forced = report.model_copy(update={"results": [
            r.model_copy(update={"arbitration": r.arbitration.model_copy(update={
                "decision": Decision.ESCALATE})}) for r in report.results if r.arbitration]})
        items = items_from_report(forced)  # the reviewer picked these claims
        queue.add_items(items)
        for item in items:
            if n < len(plain):
                closed = queue.label(item.id, REVIEWER, ReviewLabel.FACT,
                                     source_url=f"https://example.org/medquad/{n}")
            else:
                closed = queue.label(item.id, REVIEWER, ReviewLabel.HALLUCINATION,
                                     correction=corrections[n - len(plain)])
            change = teach(closed, kb, queue)
            taught.append({"claim": item.claim.text, "label": closed.labels[-1].label.value,
                           "taught": change.text if change else None})
    return taught


def summary(before: list[dict[str, Any]], after: list[dict[str, Any]],
            data: list[dict[str, str]]) -> dict[str, Any]:
    def counts(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
        sure_fact = [o for o in outcomes if o["category"] == "FACT" and o["confident"]]
        accepted = [o for o in outcomes if o["decision"] == Decision.ACCEPT.value]
        return {"n": len(outcomes), "confident_fact": len(sure_fact), "accept": len(accepted),
                "escalate": sum(o["decision"] == "ESCALATE" for o in outcomes),
                "categories": dict(Counter(o["category"] for o in outcomes)),
                "failures": list(dict.fromkeys(o["claim"] for o in sure_fact + accepted))}
    kinds = sorted({r["kind"] for r in data})
    by_kind = {k: counts([o for o, r in zip(after, data, strict=True) if r["kind"] == k])
               for k in kinds}
    return {"before": counts(before), "after": counts(after), "after_by_kind": by_kind}


def markdown(payload: dict[str, Any]) -> str:
    s = payload["summary"]
    lines = ["# Near-miss claims after teaching (issue 41)", "",
             "`.venv/bin/python benchmarks/bench_near_miss.py` (demo KB, MiniLM, built-in "
             "judge, rules decomposer, default policy; design in the script's docstring).", "",
             f"{payload['near_miss']} near-miss claims written from {payload['taught_n']} "
             "taught statements (`benchmarks/data/near_miss.jsonl`).", "",
             "| | claims | confident FACT | ACCEPT | ESCALATE |", "|---|---:|---:|---:|---:|"]
    for name in ("before", "after"):
        c = s[name]
        lines.append(f"| {name} teaching | {c['n']} | {c['confident_fact']} | {c['accept']} | "
                     f"{c['escalate']} |")
    lines += ["", "After teaching, by kind:", "",
              "| kind | claims | confident FACT | ACCEPT | categories |",
              "|---|---:|---:|---:|---|"]
    for kind, c in s["after_by_kind"].items():
        cats = ", ".join(f"{k} {v}" for k, v in sorted(c["categories"].items()))
        lines.append(f"| {kind} | {c['n']} | {c['confident_fact']} | {c['accept']} | {cats} |")
    failures = s["after"]["failures"]
    lines += ["", "Confident FACT or ACCEPT after teaching: "
              + ("none." if not failures else "; ".join(f"“{f}”" for f in failures)), "",
              "The taught statements checked again after teaching (must settle as labelled):",
              "", "| statement | category | decision | rule |", "|---|---|---|---|"]
    for o in payload["taught_again"]:
        lines.append(f"| {o['claim']} | {o['category']} | {o['decision']} | {o['rule']} |")
    settled = sum(o["rule"] == "reviewed" for o in payload["taught_again"])
    lines += ["", f"{settled} of {len(payload['taught_again'])} settle by their review."]
    return "\n".join(lines) + "\n"


def main() -> None:
    work = work_dir(__doc__, "near-miss-")
    data = rows()
    statements = list(dict.fromkeys(r["taught"] for r in data))
    kb, _ = build_demo_kb(work / "kb")
    config = demo_config(work)
    with kb, RunStore(work / "runs.db") as runs:
        checker = Checker.from_config(config, kit=FlowKit(kb=kb))
        try:
            before = [outcome(r) for r in check(checker, runs, [r["claim"] for r in data], "b")]
            taught = teach_all(checker, runs, kb, statements)
            after = [outcome(r) for r in check(checker, runs, [r["claim"] for r in data], "a")]
            again = [outcome(r) for r in check(
                checker, runs, [t["claim"] for t in taught], "again")]
        finally:
            asyncio.run(checker.aclose())
    payload = {"near_miss": len(data), "taught_n": len(taught), "taught": taught,
               "summary": summary(before, after, data), "taught_again": again,
               "rows": [{**r, "before": b, "after": a}
                        for r, b, a in zip(data, before, after, strict=True)]}
    write_results("near_miss", payload, markdown(payload))


if __name__ == "__main__":
    main()
