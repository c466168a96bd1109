"""The HTTP service's vocabulary: what requests carry and responses return.

Bodies are the project's records wherever one fits (an :class:`~medverify.records.Answer`
in, a :class:`~medverify.records.Report` out), so the OpenAPI schema is generated from the
same types the library uses; the records here add only what HTTP needs: jobs, keys, errors.
Every error has one shape, :class:`ErrorResponse`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from medverify.audit.records import AnswerAudit, AuditInput, AuditSummary
from medverify.factcheck.records import FactCheckReport
from medverify.records import Answer, Record, Report
from medverify.review import ReviewLabel
from medverify.risk.records import RiskScore
from medverify.risk.stage import RiskText
from medverify.store.access import AuditEvent, Role
from medverify.store.jobs import JobState

# ----------------------------------------------------------------------- errors


class ErrorBody(Record):
    code: str = Field(description="machine-readable: e.g. invalid_json, unauthorized, "
                      "forbidden, not_found, too_large, rate_limited, timeout, invalid_input")
    message: str = Field(description="what went wrong and what to do, for a person")
    detail: list[dict[str, Any]] | None = Field(
        None, description="per-field problems of a request that did not validate")


class ErrorResponse(Record):
    """The one error shape of every 4xx and 5xx response."""

    error: ErrorBody


# ----------------------------------------------------------------------- requests

MAX_OFFSET = 2**31 - 1
"""The largest ``offset`` a list endpoint takes (the stores clamp to 64 bits anyway)."""

SOURCE_URL_PATTERN = r"^\s*([Hh][Tt][Tt][Pp][Ss]?://[^\s/?#]+\S*)?\s*$"
"""A label's ``source_url``: blank, or an http(s) URL with a host (the schema says so; the
review also refuses private, loopback and metadata hosts, 422 ``invalid_input``)."""

ANSWER_TEXT_PATTERN = r"^[^\x00]*[^\s\x00\x1c-\x1f][^\x00]*$"
"""An answer's text has a character that is not white space (Python's, which counts
``\x1c``-``\x1f``) and no NUL byte: the checker refuses the others (422)."""


class BatchAnswer(Answer):
    """An answer of a job: as :class:`~medverify.records.Answer`, its text not blank and
    without NUL bytes (refused when the job is submitted, as ``POST /v1/check`` refuses it,
    not queued to end as "the answer is empty")."""

    text: str = Field(min_length=1, pattern=ANSWER_TEXT_PATTERN)


def _batch_answers(value: Any) -> Any:
    """A list of plain :class:`Answer` records (the Python client builds those) taken as
    :class:`BatchAnswer` ones, checked again."""
    if not isinstance(value, list):
        return value
    return [a.model_dump() if isinstance(a, Answer) and not isinstance(a, BatchAnswer) else a
            for a in value]


BatchAnswers = Annotated[list[BatchAnswer], BeforeValidator(_batch_answers),
                         Field(min_length=1)]


class KeyRequest(Record):
    name: str = Field(min_length=1, max_length=200)
    role: Role = Role.CLIENT


class LabelRequest(Record):
    """A reviewer's label of a review item."""

    label: ReviewLabel
    correction: str | None = Field(None, max_length=4000,
                                   description="the claim as it should read (taught to the "
                                   "knowledge base when the item closes with this label)")
    source_url: str | None = Field(None, max_length=2000, pattern=SOURCE_URL_PATTERN,
                                   description="where the label or correction comes from: a "
                                   "public http(s) URL (never fetched; a private or loopback "
                                   "address is refused with 422); blank: none")
    source_passage_id: str | None = Field(None, max_length=200,
                                          description="or the KB passage that decides it")
    note: str | None = Field(None, max_length=4000)


class CheckBatch(Record):
    """Many answers checked as one job."""

    answers: BatchAnswers


class AuditBatch(Record):
    """Answers with their cited sources (URLs are fetched), audited as one job."""

    inputs: list[AuditInput] = Field(min_length=1)


class FactCheckBatch(Record):
    answers: BatchAnswers


class RiskRequest(Record):
    texts: list[RiskText] = Field(min_length=1)


class RiskResponse(Record):
    scores: list[RiskScore]


# ----------------------------------------------------------------------- jobs


class CheckResult(Record):
    kind: Literal["check"] = "check"
    reports: list[Report]


class AuditResult(Record):
    kind: Literal["audit"] = "audit"
    audits: list[AnswerAudit]
    summary: AuditSummary


class FactCheckResult(Record):
    kind: Literal["factcheck"] = "factcheck"
    reports: list[FactCheckReport]


JobResult = Annotated[CheckResult | AuditResult | FactCheckResult, Field(discriminator="kind")]


class Job(JobState):
    """Work that may outlast a request: poll ``GET /v1/jobs/{id}`` until ``status`` is
    ``done``, ``failed`` or ``cancelled``."""

    result: JobResult | None = None


# ----------------------------------------------------------------------- runs and health


class RunRecord(Record):
    """A recorded run with what it produced (the kind's records; the others are None)."""

    info: dict[str, Any]
    reports: list[Report] | None = None
    audits: list[AnswerAudit] | None = None
    factchecks: list[FactCheckReport] | None = None


class Health(Record):
    status: Literal["ok"] = "ok"
    version: str


class Readiness(Record):
    ready: bool
    checks: dict[str, str] = Field(description="component -> 'ok' or what is wrong")
    kb_generation: int | None = Field(
        None, description="the KB's generation (bumped by every ingest batch and every change "
        "review teaches or reverts); on PostgreSQL the database's. None: no KB loaded")
    kb_replica_generation: int | None = Field(
        None, description="a KB on PostgreSQL: the generation this replica's search indexes "
        "have (lexical and vector; they follow the database's within [kb_settings] "
        "generation_poll_s of a search); None: not built yet, or an embedded KB (no index "
        "of its own per replica)")
    kb_generation_lag: int | None = Field(
        None, description="kb_generation - kb_replica_generation (0: this replica searches "
        "every committed change); None when either is")


class LiveCalibration(Record):
    """Which confidence card this service's judge uses (docs/judges.md, "Bring your own
    judge"), and who applied it when (the run store's audit log, ``calibration.apply``)."""

    judge: str = Field(description="the id of the judge the service runs")
    card: dict[str, Any] | None = Field(
        None, description="the live card: its id, the judge and prompt it was fitted for, the "
        "data's SHA-256, size and date, who fitted it and each category's threshold; None: "
        "no card (the judge's own confidence, if any, applies)")
    fits: bool | None = Field(None, description="whether the card was fitted for this judge "
                              "and prompt (False: no verdict gets a confidence from it)")
    applied: AuditEvent | None = Field(
        None, description="the latest audit event that applied this card (None: loaded from "
        "a file or shipped, never applied with `calibrate --apply`)")
