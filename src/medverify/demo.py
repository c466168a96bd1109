"""The offline demo: build a knowledge base from the shipped MedQuAD sample, check example
answers with planted errors using the built-in judge, and write the reports.

The demo KB holds the sample documents the answers were written against plus every sample
document of at most 5,000 characters (about half the sample) as distractors, so that it
builds with the real MiniLM embedder in well under two minutes on 2 cores; ``full=True``
(``medverify demo --full``) ingests the whole sample.

The example answers (``data/demo_answers.jsonl``) were written for this project against
documents in the sample. Each answer's ``meta["expected"]`` lists its sentences with the
category a careful reader would give them and the kind of error planted (wrong dose, wrong
population, invented effect, a claim the KB cannot settle), so the demo can show where the
judge agrees and where it does not. Nothing is tuned to make the judge look right.
"""

from __future__ import annotations

import asyncio
import time
from functools import lru_cache
from importlib import resources
from pathlib import Path

import jinja2
from pydantic import BaseModel

from medverify.checker import Checker
from medverify.config import Config, KBSettings
from medverify.decompose import DECOMPOSERS
from medverify.files import atomic_write_text
from medverify.judge import Judge
from medverify.kb import KnowledgeBase, LoadReport, iter_documents, sample_kb_path
from medverify.kit import FlowKit
from medverify.llm.facade import UsageLedger
from medverify.records import Answer, Category, Claim, ClaimResult, Document, Report
from medverify.report.html import write_html
from medverify.report.view import CATEGORY_STYLES
from medverify.store.runs import RunStore

DEFAULT_OUT = Path("medverify-demo")
SHORT_DOCUMENT_CHARS = 5000


class Expectation(BaseModel):
    """One sentence of a demo answer and what a careful reader would call it."""

    text: str
    category: Category
    kind: str


class ClaimOutcome(BaseModel):
    """A demo claim: what the judge said against what was planted."""

    claim_id: str
    claim: str
    got: Category
    expected: Category | None
    kind: str | None
    detail: str | None = None
    confident: bool | None = None  # the verdict's own flag (None: not assessed)
    not_sure: str | None = None  # why it is not confident

    @property
    def agrees(self) -> bool:
        return self.expected is not None and self.got == self.expected

    @property
    def confidently_wrong(self) -> bool:
        """A confident verdict (or one not assessed) that disagrees with the plan."""
        return self.expected is not None and not self.agrees and self.confident is not False


class AnswerOutcome(BaseModel):
    answer_id: str
    question: str | None
    html: str
    claims: list[ClaimOutcome]


class DemoResult(BaseModel):
    """What the demo did and where it put the files."""

    out_dir: Path
    kb_dir: Path
    kb_documents_added: int
    kb_documents: int
    kb_seconds: float
    check_seconds: float
    judge: str
    json_path: Path
    html_path: Path
    store_path: Path | None
    answers: list[AnswerOutcome]
    reports: list[Report]

    @property
    def claims(self) -> list[ClaimOutcome]:
        return [c for a in self.answers for c in a.claims]


def demo_answers_path() -> Path:
    return Path(str(resources.files("medverify") / "data" / "demo_answers.jsonl"))


def demo_answers() -> list[Answer]:
    """The shipped example answers (question, text, and expectations in ``meta``)."""
    lines = demo_answers_path().read_text("utf-8").splitlines()
    return [Answer.model_validate_json(line) for line in lines if line.strip()]


def expectations(answer: Answer) -> list[Expectation]:
    return [Expectation.model_validate(e) for e in answer.meta.get("expected", [])]


def expected_for(answer: Answer, claim: Claim) -> Expectation | None:
    """The expectation of the sentence that holds the claim (by the claim's span)."""
    if claim.span is None:
        return None
    for expectation in expectations(answer):
        start = answer.text.find(expectation.text)
        if start <= claim.span.start < start + len(expectation.text) and start >= 0:
            return expectation
    return None


def demo_documents(full: bool = False) -> list[Document]:
    """The documents of the demo KB: the ones the answers were written against, and every
    other sample document of at most ``SHORT_DOCUMENT_CHARS`` characters as distractors
    (about half the sample; embedding all of it takes minutes on 2 cores). ``full``: all."""
    wanted = {d for a in demo_answers() for d in a.meta.get("written_against", [])}
    documents = list(iter_documents([sample_kb_path()], LoadReport()))
    if full:
        return documents
    return [d for d in documents if d.doc_id in wanted or len(d.text) <= SHORT_DOCUMENT_CHARS]


def build_demo_kb(kb_dir: Path, settings: KBSettings | None = None,
                  full: bool = False) -> tuple[KnowledgeBase, int]:
    """Open or create the demo KB and ingest its documents (documents already there are
    skipped, so a second run adds nothing). Returns the KB and the documents added."""
    kb = KnowledgeBase.open_or_create(kb_dir, settings or KBSettings())
    stats = kb.ingest(demo_documents(full))
    return kb, stats.documents_added


def demo_config(out_dir: Path, settings: KBSettings | None = None) -> Config:
    """Built-in judge and rules decomposer whatever the user's config says (offline)."""
    config = Config.load(None, kb=out_dir / "kb", store=out_dir / "runs.db")
    update = {"model": None, "judge": "builtin", "decomposer": "rules"}
    if settings is not None:
        update["kb_settings"] = settings
    return config.model_copy(update=update)


async def arun_demo(
    out_dir: Path = DEFAULT_OUT,
    *,
    judge: Judge | None = None,
    settings: KBSettings | None = None,
    record: bool = True,
    full: bool = False,
) -> DemoResult:
    """Build (or reuse) the demo KB under ``out_dir``, check the example answers, write
    ``report.json``, ``report.html`` (overview) and one HTML page per answer."""
    out_dir.mkdir(parents=True, exist_ok=True)
    config = demo_config(out_dir, settings)
    started = time.perf_counter()
    kb, added = await asyncio.to_thread(build_demo_kb, out_dir / "kb", config.kb_settings, full)
    kb_seconds = time.perf_counter() - started
    kb_documents = kb.stats().documents
    try:
        checker = _checker(config, kb, judge)
        started = time.perf_counter()
        reports = await _check(checker, demo_answers(), config, record)
        check_seconds = time.perf_counter() - started
    finally:
        kb.close()
    result = DemoResult(
        out_dir=out_dir, kb_dir=out_dir / "kb", kb_documents_added=added,
        kb_documents=kb_documents,
        kb_seconds=kb_seconds, check_seconds=check_seconds,
        judge=checker.models["judge"], json_path=out_dir / "report.json",
        html_path=out_dir / "report.html", store_path=config.store_path if record else None,
        answers=[_outcome(n, r) for n, r in enumerate(reports, 1)], reports=reports,
    )
    write_outputs(result)
    return result


def run_demo(out_dir: Path = DEFAULT_OUT, **options: object) -> DemoResult:
    """Synchronous twin of :func:`arun_demo`."""
    return asyncio.run(arun_demo(out_dir, **options))  # type: ignore[arg-type]


def _checker(config: Config, kb: KnowledgeBase, judge: Judge | None) -> Checker:
    if judge is None:
        return Checker.from_config(config, kit=FlowKit(kb=kb))
    return Checker(config=config, kb=kb, decomposer=DECOMPOSERS.create("rules", config),
                   judge=judge, ledger=UsageLedger())


async def _check(checker: Checker, answers: list[Answer], config: Config,
                 record: bool) -> list[Report]:
    if not record:
        return await checker.run(answers)
    with RunStore(config.store_path) as store:
        return await checker.run(answers, store=store)


def _outcome(number: int, report: Report) -> AnswerOutcome:
    claims = []
    for result in report.results:
        expectation = expected_for(report.answer, result.claim)
        claims.append(ClaimOutcome(
            claim_id=result.claim.id, claim=result.claim.text, got=result.category,
            expected=expectation.category if expectation else None,
            kind=expectation.kind if expectation else None, detail=_detail(result),
            confident=result.confident, not_sure=result.not_sure,
        ))
    return AnswerOutcome(answer_id=report.answer.id, question=report.answer.question,
                         html=f"answers/{number:02d}-{report.answer.id}.html", claims=claims)


def _detail(result: ClaimResult) -> str | None:
    """The built-in judge's two deciding probabilities, or the error, in a few words."""
    if result.error:
        return result.error
    probs = result.verdict.probabilities if result.verdict else None
    if not probs or "SUPPORTED" not in probs:
        return None
    return f"P(supported) {probs['SUPPORTED']:.2f} · P(contradicted) {probs['CONTRADICTED']:.2f}"


def write_outputs(result: DemoResult) -> None:
    """report.json (all reports), one HTML page per answer, and report.html linking them."""
    body = ",\n".join(r.model_dump_json(indent=2) for r in result.reports)
    atomic_write_text(result.json_path, f"[\n{body}\n]\n")
    for outcome, report in zip(result.answers, result.reports, strict=True):
        write_html(report, result.out_dir / outcome.html)
    atomic_write_text(result.html_path, render_overview(result))


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    templates = Path(str(resources.files("medverify") / "report" / "templates"))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True)
    return env.get_template("demo_overview.html.j2")


def render_overview(result: DemoResult) -> str:
    """The demo's front page: one row per answer, every claim with planted vs judged."""
    claims = result.claims
    return _template().render(
        result=result,
        rows=list(zip(result.answers, result.reports, strict=True)),
        styles=CATEGORY_STYLES,
        n_claims=len(claims),
        n_planted=sum(1 for c in claims if c.expected is not None),
        n_agree=sum(1 for c in claims if c.agrees),
        n_confident=sum(1 for c in claims if c.expected is not None and c.confident),
        n_confident_wrong=sum(1 for c in claims if c.confidently_wrong),
    )
