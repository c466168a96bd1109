"""A hostile LLM judge against the evidence rule (issue 27, part 4): how many hostile replies
still make their claim FACT (target 0), and how many honest replies still count.

Every reply of the corpus in ``tests/judge/test_quote_cases.py`` goes through the real LLM
judge (prompt, fences, strict parser, ``judge.evidence.check_quote``) over a scripted model; the
table gives each reply's category and the quote problem or error that stopped it. Writes
benchmarks/results/hostile_judge.{json,md}.

    .venv/bin/python benchmarks/bench_hostile_judge.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from medverify.judge import JudgeItem
from medverify.judge.evidence import CONTRADICT_SHARE, MIN_QUOTE_WORDS, SUPPORT_SHARE
from medverify.judge.llm import LLMJudge
from medverify.llm.facade import Model
from medverify.records import Category, Claim, Passage, Verdict
from medverify.testing import ScriptedProvider

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "tests" / "judge"))

from test_quote_cases import (  # noqa: E402
    HONEST,
    HOSTILE,
    KNOWN_GAPS,
    QuoteCase,
    corpus_reply,
)


def judge_case(case: QuoteCase) -> Verdict:
    """The LLM judge's verdict on the case's claim, the model answering with its reply."""
    judge = LLMJudge(Model(ScriptedProvider(corpus_reply({case.claim: case}))))
    item = JudgeItem(claim=Claim(id="c1", text=case.claim),
                     passages=[Passage(id="doc#0", doc_id="doc", text=case.passage)])
    [verdict] = asyncio.run(judge.judge([item]))
    return verdict


def row(case: QuoteCase, verdict: Verdict, group: str) -> dict[str, Any]:
    held = verdict.factual if case.supported else verdict.counterfactual
    cause = verdict.error or (held.quote_problem if held else None)
    return {"name": case.name, "group": group, "what": case.what, "claim": case.claim,
            "quote": case.quote, "says": "contradicted" if case.contradicted else "supported",
            "category": verdict.category.value, "counts": bool(held and held.counts),
            "cause": cause}


def summary(rows: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    hostile = [r for r in rows if r["group"] == "hostile"]
    honest = [r for r in rows if r["group"] == "honest"]
    gaps = [r for r in rows if r["group"] == "known gap"]
    return {
        "hostile": len(hostile),
        "hostile_fact": sum(r["category"] == Category.FACT for r in hostile),
        "hostile_counted": sum(r["counts"] for r in hostile),
        "hostile_error": sum(r["category"] == Category.ERROR for r in hostile),
        "honest": len(honest),
        "honest_kept": sum(r["counts"] for r in honest),
        "known_gaps": len(gaps),
        "known_gaps_fact": sum(r["category"] == Category.FACT for r in gaps),
        "thresholds": {"support_share": SUPPORT_SHARE, "contradict_share": CONTRADICT_SHARE,
                       "min_quote_words": MIN_QUOTE_WORDS},
        "seconds": round(seconds, 3),
    }


def markdown(rows: list[dict[str, Any]], totals: dict[str, Any]) -> str:
    lines = [
        "# A hostile LLM judge against the evidence rule",
        "",
        "`python benchmarks/bench_hostile_judge.py`: every reply of "
        "`tests/judge/test_quote_cases.py` through the real LLM judge (prompt, parser, "
        "`judge.evidence.check_quote`) over a "
        "scripted model. Target: no hostile reply makes a FACT; honest replies still count.",
        "",
        f"- hostile replies: {totals['hostile']}, FACT: **{totals['hostile_fact']}**, "
        f"analyses counted: {totals['hostile_counted']}, ERROR (unusable reply): "
        f"{totals['hostile_error']}",
        f"- honest replies: {totals['honest']}, still counted: **{totals['honest_kept']}**",
        f"- known gaps (hostile replies the quote rule does not stop, not a target): "
        f"{totals['known_gaps_fact']} of {totals['known_gaps']} FACT from the parser alone",
        "- the corpus was written together with the rule: this is a regression table of "
        "named attacks, not an estimate of how often an unseen attack gets through",
        f"- thresholds: supporting share >= {SUPPORT_SHARE} (and every number), contradicting "
        f"share >= {CONTRADICT_SHARE}, longest piece >= {MIN_QUOTE_WORDS} words",
        f"- wall time: {totals['seconds']:.2f} s for {len(rows)} judge calls",
        "",
        "| reply | group | judge says | category | counted | why not counted |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        cause = (r["cause"] or "").replace("|", "\\|")
        lines.append(f"| {r['name']}: {r['what']} | {r['group']} | "
                     f"{r['says']} | {r['category']} | {'yes' if r['counts'] else 'no'} | "
                     f"{cause} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    start = time.perf_counter()
    rows = [row(c, judge_case(c), "hostile") for c in HOSTILE]
    rows += [row(c, judge_case(c), "honest") for c in HONEST]
    rows += [row(c, judge_case(c), "known gap") for c in KNOWN_GAPS]
    totals = summary(rows, time.perf_counter() - start)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "hostile_judge.json").write_text(
        json.dumps({"summary": totals, "replies": rows}, indent=2, ensure_ascii=False) + "\n")
    text = markdown(rows, totals)
    (RESULTS / "hostile_judge.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
