"""Atomic fact-checking and correction, end to end and offline, with a scripted model.

A small guideline knowledge base (four short texts written for this example) and a scripted
model (``medverify.testing.factcheck_model``) whose RAG answer has two planted errors: a
wrong starting dose of metformin (5000 mg) and an invented contraindication (asthma). The
real pipeline then splits the answer into atomic facts, retrieves fresh evidence for each,
judges it, rewrites the false facts, checks the rewrites, rewrites the answer and traces
every fact to its chunk. Only the model is scripted: retrieval, embeddings (MiniLM), the
loop, the report and the token accounting are the real ones.

    python examples/factcheck_offline/run.py --out factcheck-example
    open factcheck-example/report.html

Add ``--offline`` to run the same answer without any model: the built-in judge and
extractive corrections (evidence sentences, labelled as such). On this tiny knowledge base
the shipped verifier scores every fact as both supported and contradicted, so all four come
out UNVERIFIABLE and nothing is corrected: the offline judge's limits, shown honestly (see
docs/factcheck.md for what it catches on the demo knowledge base).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from rich.console import Console

from medverify.answerer import RagAnswerer
from medverify.config import Config
from medverify.factcheck.loop import FactChecker
from medverify.factcheck.report import print_factcheck, write_factcheck_html
from medverify.kb import KnowledgeBase
from medverify.kit import FlowKit
from medverify.llm.facade import get_model
from medverify.records import Answer, Document
from medverify.testing import (
    DEMO_ANSWER,
    DEMO_QUESTION,
    ScriptedProvider,
    factcheck_model,
    register_fake,
)

GUIDELINES = [
    Document(doc_id="metformin-dosing", title="Metformin: starting treatment",
             text="Metformin is a first-line medicine for type 2 diabetes in adults. The usual "
             "starting dose of metformin is 500 mg once or twice daily, taken with meals. The "
             "dose is raised slowly to limit stomach upset, a common side effect when starting "
             "treatment."),
    Document(doc_id="metformin-safety", title="Metformin: who should not take it",
             text="Metformin is contraindicated in people with severe kidney disease. It should "
             "be paused before surgery or before imaging with iodinated contrast in some "
             "people."),
    Document(doc_id="aspirin", title="Aspirin for prevention",
             text="Low-dose aspirin reduces the risk of heart attack in some adults. Aspirin is "
             "not recommended for children with viral infections because of Reye syndrome."),
    Document(doc_id="hypertension", title="High blood pressure: lifestyle",
             text="Less salt, regular exercise and weight loss are recommended for everyone with "
             "high blood pressure."),
]


async def run(out: Path, offline: bool) -> int:
    out.mkdir(parents=True, exist_ok=True)
    with KnowledgeBase.open_or_create(out / "kb") as kb:
        kb.ingest(GUIDELINES)
        if offline:
            config = Config.load(store=out / "runs.db")
            checker = FactChecker.from_config(config, kit=FlowKit(kb=kb))
            report = await checker.check(Answer(text=DEMO_ANSWER, question=DEMO_QUESTION))
            await checker.aclose()
        else:
            register_fake("factcheck-example", ScriptedProvider(factcheck_model()))
            config = Config.load(model="fake:factcheck-example", store=out / "runs.db",
                                 llm={"cache": False})
            model = get_model(config.model or "", config.llm)
            rag = await RagAnswerer(kb, model).answer(DEMO_QUESTION)
            checker = FactChecker.from_config(config, kit=FlowKit(kb=kb, model=model))
            report = await checker.check(Answer(text=rag.text, question=DEMO_QUESTION), rag=rag)
            await checker.aclose()
            await model.aclose()
    print_factcheck(report, Console())
    write_factcheck_html(out / "report.html", report)
    print(f"\nreport: {out / 'report.html'}")
    return 1 if report.errors else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("factcheck-example"))
    parser.add_argument("--offline", action="store_true",
                        help="no model: built-in judge and extractive corrections")
    args = parser.parse_args(argv)
    return asyncio.run(run(args.out, args.offline))


if __name__ == "__main__":
    sys.exit(main())
