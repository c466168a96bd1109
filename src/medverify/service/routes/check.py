"""``POST /v1/check`` and ``POST /v1/risk``: one answer checked, or texts scored for
hallucination risk, within the request (batches go to the jobs routes)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from medverify.decompose.answer import validate_answer
from medverify.errors import ConfigError
from medverify.records import Answer, Report
from medverify.risk.stage import RiskText
from medverify.service.admission import within
from medverify.service.compact import Detail, compact_report
from medverify.service.metrics import Checked
from medverify.service.records import RiskRequest, RiskResponse
from medverify.service.routes.deps import Client, State
from medverify.text import flat_sentences

router = APIRouter(tags=["check"])


@router.post("/v1/check", response_model=Report)
async def check(answer: Answer, request: Request, key: Client, state: State,
                detail: Annotated[Detail, Query(
                    description="compact (default): each claim's decision, category, "
                    "confidence, deciding quote and the passages it names without their "
                    "text; full: the whole report, as GET /v1/runs/{run_id} has it")] =
                Detail.COMPACT) -> Report:
    """Check one answer against the knowledge base.

    The report holds its claims with categories, evidence, probabilities (and
    hallucination risk when a classifier is configured), arbitration decisions, and the
    tokens this request spent (``usage``). By default it is compact (``notes.response``
    says so): passages are named (id, title, url) but their texts, the judge's raw output
    and the config are left out; ``detail=full`` answers the whole report, and the run
    store keeps it either way (``GET /v1/runs/{run_id}``). Recorded in the run store;
    escalated claims join the review queue (``[review] enabled``); batches go to ``POST
    /v1/jobs/check``.

    422 ``invalid_input`` for an empty answer or one over ``max_answer_chars``; 503
    ``not_ready`` when the KB or judge did not load; 503 ``overloaded`` (with
    ``Retry-After``, nothing checked or recorded) when no check slot came free within
    ``[service] queue_wait_s``; 503 ``too_long`` (no ``Retry-After``, nothing checked or
    recorded) when the answer is predicted to take past ``[service] sync_work_share`` of
    ``request_timeout_s`` even alone: submit it as a job; 504 ``timeout`` when the check
    itself ran past ``[service] request_timeout_s`` (counted from its slot's grant; its run
    is recorded ``interrupted``)."""
    state.need_checker()  # 503 before anything else is looked at
    validate_answer(answer, state.config.max_answer_chars)
    with state.metered() as used:
        [report] = await state.checking(lambda: state.check([answer]),
                                        units=len(flat_sentences(answer.text)))
    request.state.target = report.run_id
    request.state.checked = Checked.of([report])  # metrics and log line
    report = report.model_copy(update={"usage": used.as_dict()})
    return report if detail is Detail.FULL else compact_report(report)


@router.post("/v1/risk", response_model=RiskResponse)
async def risk(body: RiskRequest, key: Client, state: State) -> RiskResponse:
    """Hallucination risk of each text from token log-probabilities (no KB).

    409 ``not_configured`` without a ``[risk] classifier``; 504 ``timeout`` after
    ``[service] request_timeout_s``."""
    checker = state.need_checker()
    if checker.risk is None:
        raise ConfigError("no risk classifier is configured ([risk] classifier = DIR, with "
                          "its scorers)")
    texts: list[RiskText] = body.texts
    scores = await within(state.config.service.request_timeout_s, checker.risk.score(texts))
    return RiskResponse(scores=scores)
