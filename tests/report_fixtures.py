"""A small, realistic example report for tests (reusable by any test module).

``example_report()`` holds one answer about metformin with seven claims covering every
category: facts, a hallucination, a judgment error, a coverage gap, an errored claim
and a claim without a span in the answer.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from medverify.records import (
    Analysis,
    Answer,
    Category,
    Claim,
    ClaimResult,
    Passage,
    Report,
    Source,
    Span,
    Usage,
    Verdict,
)
from medverify.report.metrics import compute_metrics
from medverify.verdict_rules import CATEGORY_SCORE

QUESTION = "What is the first-line drug treatment for type 2 diabetes, and what are its main risks?"

ANSWER_TEXT = (
    "Metformin is the usual first-line drug for type 2 diabetes, alongside diet and exercise. "
    "It lowers blood glucose mainly by reducing glucose production in the liver. "
    "Metformin commonly causes weight gain. "
    "It should be stopped when eGFR falls below 30 mL/min/1.73 m². "
    "Lactic acidosis is a rare but serious adverse effect. "
    "Most patients reach their HbA1c target within two weeks of starting it."
)

JUDGE = "llm:vllm/Qwen2.5-32B-Instruct"

PASSAGES: dict[str, Passage] = {
    p.id: p
    for p in (
        Passage(
            id="ada-9#3",
            doc_id="ada-soc-2024-9",
            title="ADA Standards of Care 2024, section 9",
            url="https://diabetesjournals.org/care/article/47/Supplement_1/S158/153955",
            source="guideline",
            score=0.82,
            text="Metformin should be started at the time type 2 diabetes is diagnosed unless "
            "there are contraindications, together with lifestyle management.",
        ),
        Passage(
            id="label-metf#12",
            doc_id="fda-label-metformin",
            title="Metformin hydrochloride label",
            url="https://www.accessdata.fda.gov/drugsatfda_docs/label/2017/020357s037lbl.pdf",
            source="label",
            score=0.77,
            text="Metformin decreases hepatic glucose production, decreases intestinal absorption "
            "of glucose, and improves insulin sensitivity.",
        ),
        Passage(
            id="label-metf#20",
            doc_id="fda-label-metformin",
            title="Metformin hydrochloride label",
            url="https://www.accessdata.fda.gov/drugsatfda_docs/label/2017/020357s037lbl.pdf",
            source="label",
            score=0.71,
            text="Postmarketing cases of metformin-associated lactic acidosis have resulted in "
            "death. Weight: patients on metformin showed weight loss or no change.",
        ),
        Passage(
            id="cochrane-la#2",
            doc_id="cochrane-cd002967",
            title="Risk of lactic acidosis with metformin",
            url="https://doi.org/10.1002/14651858.CD002967.pub4",
            source="review",
            score=0.64,
            text="There is no evidence from prospective comparative trials that metformin is "
            "associated with an increased risk of lactic acidosis.",
        ),
        Passage(
            id="kdigo#7",
            doc_id="kdigo-2022-diabetes-ckd",
            title="KDIGO 2022 diabetes in CKD",
            url="https://kdigo.org/guidelines/diabetes-ckd/",
            source="guideline",
            score=0.69,
            text="Metformin should be discontinued when eGFR is below 30 ml/min per 1.73 m².",
        ),
    )
}


def _span(fragment: str) -> Span:
    start = ANSWER_TEXT.index(fragment)
    return Span(start=start, end=start + len(fragment))


def _verdict(claim_id: str, supported: Analysis, contradicted: Analysis, ids: list[str]) -> Verdict:
    raw = json.dumps({"supported": supported.holds, "contradicted": contradicted.holds})
    return Verdict(
        claim_id=claim_id,
        passage_ids=ids,
        factual=supported,
        counterfactual=contradicted,
        judge=JUDGE,
        prompt_version="judge/v1",
        raw_output=raw,
    )


def _judged(claim: Claim, ids: list[str], factual: Analysis, counter: Analysis) -> ClaimResult:
    passages = [PASSAGES[i] for i in ids]
    return ClaimResult.from_verdict(claim, passages, _verdict(claim.id, factual, counter, ids))


def _no(reason: str) -> Analysis:
    return Analysis(holds=False, reason=reason)


def example_results() -> list[ClaimResult]:
    """Seven claim results: FACT x3, HALLUCINATION, JUDGMENT_ERROR, ERROR, COVERAGE_GAP."""
    c = [
        Claim(
            id="c1",
            text="Metformin is the usual first-line drug for type 2 diabetes.",
            span=_span("Metformin is the usual first-line drug for type 2 diabetes"),
            sentence=0,
        ),
        Claim(
            id="c2",
            text="Metformin is used alongside diet and exercise.",
            span=_span("alongside diet and exercise"),
            sentence=0,
        ),
        Claim(
            id="c3",
            text="Metformin lowers blood glucose mainly by reducing hepatic glucose production.",
            span=_span(
                "It lowers blood glucose mainly by reducing glucose production in the liver."
            ),
            sentence=1,
        ),
        Claim(
            id="c4",
            text="Metformin commonly causes weight gain.",
            span=_span("Metformin commonly causes weight gain."),
            sentence=2,
        ),
        Claim(
            id="c5",
            text="Metformin should be stopped when eGFR falls below 30 mL/min/1.73 m².",
            span=_span("It should be stopped when eGFR falls below 30 mL/min/1.73 m²."),
            sentence=3,
        ),
        Claim(
            id="c6",
            text="Lactic acidosis is a rare but serious adverse effect of metformin.",
            span=_span("Lactic acidosis is a rare but serious adverse effect."),
            sentence=4,
        ),
        Claim(
            id="c7",
            text="Most patients on metformin reach their HbA1c target within two weeks.",
            span=_span("Most patients reach their HbA1c target within two weeks of starting it."),
            sentence=5,
        ),
        Claim(id="c8", text="Metformin is taken by mouth.", span=None, sentence=None),
    ]
    return [
        _judged(
            c[0],
            ["ada-9#3"],
            Analysis(
                holds=True,
                passage_id="ada-9#3",
                quote="Metformin should be started at the time type 2 diabetes is diagnosed",
                reason="The ADA recommends starting metformin at diagnosis.",
            ),
            _no("No passage recommends another first-line drug."),
        ),
        _judged(
            c[1],
            ["ada-9#3"],
            Analysis(
                holds=True,
                passage_id="ada-9#3",
                quote="together with lifestyle management",
                reason="Lifestyle management is diet and exercise.",
            ),
            _no("Nothing says metformin replaces lifestyle changes."),
        ),
        _judged(
            c[2],
            ["label-metf#12"],
            Analysis(
                holds=True,
                passage_id="label-metf#12",
                quote="Metformin decreases hepatic glucose production",
                reason="The label names reduced hepatic glucose production first.",
            ),
            _no("Not contradicted."),
        ),
        _judged(
            c[3],
            ["label-metf#20", "ada-9#3"],
            _no("No passage reports weight gain."),
            Analysis(
                holds=True,
                passage_id="label-metf#20",
                quote="patients on metformin showed weight loss or no change",
                reason="The label reports weight loss or no change, not gain.",
            ),
        ),
        ClaimResult.failed(c[4], "judge timed out after 60 s (4 retries)", [PASSAGES["kdigo#7"]]),
        _judged(
            c[5],
            ["label-metf#20", "cochrane-la#2"],
            Analysis(
                holds=True,
                passage_id="label-metf#20",
                quote="cases of metformin-associated lactic acidosis have resulted in death",
                reason="The label reports fatal lactic acidosis.",
            ),
            Analysis(
                holds=True,
                passage_id="cochrane-la#2",
                quote="no evidence ... that metformin is associated with an increased risk",
                reason="The Cochrane review finds no increased risk.",
            ),
        ),
        _judged(
            c[6],
            ["ada-9#3", "label-metf#12"],
            _no("No passage gives a time to HbA1c target."),
            _no("No passage gives a contrary time either."),
        ),
        _judged(
            c[7],
            ["label-metf#12"],
            Analysis(
                holds=True,
                passage_id="label-metf#12",
                quote="intestinal absorption",
                reason="The label describes oral tablets.",
            ),
            _no("-"),
        ),
    ]


def example_answer() -> Answer:
    return Answer(
        text=ANSWER_TEXT,
        question=QUESTION,
        sources=[
            Source(
                id="1",
                url="https://www.nice.org.uk/guidance/ng28",
                title="NICE NG28",
                status="fetched",
                http_status=200,
            )
        ],
    )


def example_report(
    results: list[ClaimResult] | None = None, answer: Answer | None = None
) -> Report:
    """The example report; pass ``results`` or ``answer`` to swap either in."""
    results = example_results() if results is None else results
    return Report(
        answer=answer or example_answer(),
        results=results,
        metrics=compute_metrics(results),
        run_id="run-20240611-142233-7c1d",
        created_at=datetime(2024, 6, 11, 14, 22, 33, tzinfo=UTC),
        models={
            "decompose": "openai:gpt-4o-mini-2024-07-18",
            "judge": JUDGE,
            "embed": "all-MiniLM-L6-v2",
        },
        prompt_versions={"decompose": "decompose/v1", "judge": "judge/v1"},
        kb_snapshot="kb-diabetes-2024-06@3f9a2c1e",
        usage={
            "decompose": Usage(calls=1, prompt_tokens=412, completion_tokens=236),
            "judge": Usage(calls=8, cached_calls=2, prompt_tokens=9_873, completion_tokens=1_204),
        },
    )


def result_of(category: Category, claim_id: str = "c", text: str = "A claim.") -> ClaimResult:
    """A bare claim result of the given category (for metric tests)."""
    claim = Claim(id=claim_id, text=text)
    if category == Category.ERROR:
        return ClaimResult.failed(claim, "judge failed")
    return ClaimResult(claim=claim, category=category, score=CATEGORY_SCORE[category])
