"""The Python client of ``medverify serve`` against ``httpx.MockTransport`` handlers (no
server): each method's request (method, path, query, body, key) and its typed response;
the error shape, 429 retries, non-JSON errors, bad responses, unreachable servers; wait();
and the async twin."""

from __future__ import annotations

import asyncio
import email.utils
import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

import medverify
from medverify import client as client_module
from medverify.audit.records import AuditInput
from medverify.client import (
    AsyncClient,
    Client,
    Overloaded,
    RateLimited,
    ServiceError,
    WaitTimeout,
)
from medverify.errors import MedverifyError
from medverify.records import Answer, Metrics, Report, Source
from medverify.review import ReviewItem, ReviewLabel, ReviewStatus
from medverify.risk.records import RiskScore
from medverify.risk.stage import RiskText
from medverify.service.records import Health, Job, Readiness, RunRecord
from medverify.store.access import AuditEvent, KeyInfo, NewKey, Role
from medverify.store.jobs import JobStatus

BASE = "http://medverify.test"
KEY = "mv_sekret"
WHEN = "2025-01-02T03:04:05Z"


def report_json(text: str = "Metformin is first-line.") -> dict[str, Any]:
    metrics = Metrics(n_claims=0, n_scored=0, n_errors=0, counts={}, statement_support=None,
                      response_support=None, mean_score=None)
    return Report(answer=Answer(text=text), results=[], metrics=metrics).model_dump(
        mode="json")


def job_json(status: str = "queued", job_id: str = "j1", kind: str = "check") -> dict[str, Any]:
    return {"id": job_id, "kind": kind, "status": status, "created_at": WHEN}


def key_json(key_id: str = "k1", role: str = "client") -> dict[str, Any]:
    return {"id": key_id, "name": "ci", "role": role, "created_at": WHEN}


def item_json(status: str = "open", final: str | None = None) -> dict[str, Any]:
    return {"id": "rv-1", "answer_id": "a1", "answer_text": "Metformin is first-line.",
            "claim": {"id": "c1", "text": "Metformin is first-line."},
            "category": "COVERAGE_GAP", "priority": 0.5, "status": status,
            "final_label": final, "created_at": WHEN}


def loop_json() -> dict[str, Any]:
    total = {"period": "all", "start": "2025-01-02", "claims_checked": 10, "escalated": 2,
             "escalation_rate": 0.2, "labels": 1, "items_closed": 1, "judge_agreement": 1.0,
             "kb_added": 1, "kb_reverted": 0}
    return {"by": "week", "periods": [{**total, "period": "2025-W01"}], "total": total,
            "queue": {"open": 1, "closed": 1}}


def error_json(code: str, message: str, detail: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "detail": detail}}


class Server:
    """A MockTransport handler answering from a queue of responses (the last repeats),
    recording every request."""

    def __init__(self, *responses: httpx.Response | Callable[[httpx.Request], httpx.Response]):
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]
        return answer(request) if callable(answer) else answer

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]

    def body(self, index: int = -1) -> Any:
        return json.loads(self.requests[index].content)


def ok(payload: Any, status: int = 200, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=payload, headers=headers)


def make(server: Server, **options: Any) -> Client:
    return Client(BASE, KEY, transport=httpx.MockTransport(server), **options)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(client_module, "_sleep", slept.append)
    return slept


# ----------------------------------------------------------------------- every method

ANSWER = Answer(text="Aspirin prevents strokes.", question="Does aspirin help?",
                sources=[Source(id="1", url="https://example.org/a")])

# (method name, args, kwargs, HTTP method, path, query, body sent, response, status, check)
CASES: list[tuple[Any, ...]] = [
    ("health", (), {}, "GET", "/healthz", {}, None, {"status": "ok", "version": "0.1.0"},
     200, lambda r: isinstance(r, Health) and r.version == "0.1.0"),
    ("ready", (), {}, "GET", "/readyz", {}, None, {"ready": True, "checks": {"kb": "ok"}},
     200, lambda r: isinstance(r, Readiness) and r.ready),
    ("check", (ANSWER,), {}, "POST", "/v1/check", {"detail": "compact"},
     ANSWER.model_dump(mode="json"),
     report_json(), 200, lambda r: isinstance(r, Report) and r.metrics.n_claims == 0),
    ("check", ("Plain text.",), {"detail": "full"}, "POST", "/v1/check", {"detail": "full"},
     Answer(text="Plain text.").model_dump(mode="json"),
     report_json(), 200, lambda r: isinstance(r, Report)),
    ("submit_check", ([ANSWER, "Plain text."],), {}, "POST", "/v1/jobs/check", {},
     {"answers": [ANSWER.model_dump(mode="json"),
                  Answer(text="Plain text.").model_dump(mode="json")]},
     job_json(), 202, lambda r: isinstance(r, Job) and r.status is JobStatus.QUEUED),
    ("submit_audit", ([AuditInput(answer=ANSWER), ANSWER],), {}, "POST", "/v1/audit", {},
     {"inputs": [AuditInput(answer=ANSWER).model_dump(mode="json")] * 2},
     job_json(kind="audit"), 202, lambda r: isinstance(r, Job) and r.kind == "audit"),
    ("submit_factcheck", ([ANSWER],), {}, "POST", "/v1/factcheck", {},
     {"answers": [ANSWER.model_dump(mode="json")]},
     job_json(kind="factcheck"), 202, lambda r: r.kind == "factcheck"),
    ("job", ("j1",), {}, "GET", "/v1/jobs/j1", {}, None, job_json("running"), 200,
     lambda r: r.status is JobStatus.RUNNING),
    ("jobs", (), {}, "GET", "/v1/jobs", {"limit": "50"}, None, [job_json(), job_json()],
     200, lambda r: len(r) == 2 and all(isinstance(j, Job) for j in r)),
    ("jobs", (), {"status": JobStatus.DONE, "limit": 5}, "GET", "/v1/jobs",
     {"status": "done", "limit": "5"}, None, [], 200, lambda r: r == []),
    ("cancel", ("j1",), {}, "POST", "/v1/jobs/j1/cancel", {}, None,
     {**job_json("running"), "cancel_requested": True}, 200, lambda r: r.cancel_requested),
    ("run", ("r1",), {}, "GET", "/v1/runs/r1", {}, None,
     {"info": {"id": "r1"}, "reports": [report_json()]}, 200,
     lambda r: isinstance(r, RunRecord) and isinstance(r.reports[0], Report)),
    ("keys", (), {}, "GET", "/v1/keys", {}, None, [key_json()], 200,
     lambda r: isinstance(r[0], KeyInfo) and r[0].role is Role.CLIENT),
    ("create_key", ("ci",), {}, "POST", "/v1/keys", {}, {"name": "ci", "role": "client"},
     {"key": key_json(), "secret": "mv_new"}, 201,
     lambda r: isinstance(r, NewKey) and r.secret == "mv_new"),
    ("create_key", ("boss",), {"role": Role.ADMIN}, "POST", "/v1/keys", {},
     {"name": "boss", "role": "admin"}, {"key": key_json(role="admin"), "secret": "s"}, 201,
     lambda r: r.key.role is Role.ADMIN),
    ("revoke_key", ("k1",), {}, "POST", "/v1/keys/k1/revoke", {}, None,
     {**key_json(), "revoked_at": WHEN}, 200, lambda r: r.revoked_at is not None),
    ("audit_log", (), {}, "GET", "/v1/audit-log", {"limit": "100"}, None,
     [{"id": 1, "at": WHEN, "key_id": "k1", "action": "keys.create", "status": 201}], 200,
     lambda r: isinstance(r[0], AuditEvent) and r[0].action == "keys.create"),
    ("review_items", (), {}, "GET", "/v1/review/items", {"limit": "50"}, None,
     [item_json()], 200,
     lambda r: isinstance(r[0], ReviewItem) and r[0].status is ReviewStatus.OPEN),
    ("review_items", (), {"status": ReviewStatus.CLOSED, "topic": "diabetes",
                          "min_priority": 0.25, "limit": 5}, "GET", "/v1/review/items",
     {"status": "closed", "topic": "diabetes", "min_priority": "0.25", "limit": "5"}, None,
     [], 200, lambda r: r == []),
    ("review_items", (), {"status": "needs_second"}, "GET", "/v1/review/items",
     {"status": "needs_second", "limit": "50"}, None, [], 200, lambda r: r == []),
    ("review_item", ("rv-1",), {}, "GET", "/v1/review/items/rv-1", {}, None, item_json(),
     200, lambda r: isinstance(r, ReviewItem) and r.claim.text.startswith("Metformin")),
    ("label", ("rv-1", "FACT"), {"source_url": "https://example.org/m"}, "POST",
     "/v1/review/items/rv-1/labels", {},
     {"label": "FACT", "correction": None, "source_url": "https://example.org/m",
      "source_passage_id": None, "note": None},
     item_json("closed", "FACT"), 200, lambda r: r.final_label is ReviewLabel.FACT),
    ("label", ("rv-1", ReviewLabel.HALLUCINATION),
     {"correction": "Metformin is second-line.", "note": "see guideline"}, "POST",
     "/v1/review/items/rv-1/labels", {},
     {"label": "HALLUCINATION", "correction": "Metformin is second-line.",
      "source_url": None, "source_passage_id": None, "note": "see guideline"},
     item_json("closed", "HALLUCINATION"), 200, lambda r: r.status is ReviewStatus.CLOSED),
    ("review_progress", (), {}, "GET", "/v1/review/progress", {}, None, loop_json(), 200,
     lambda r: r.total.escalation_rate == 0.2 and r.queue == {"open": 1, "closed": 1}),
]


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "method", "path", "query", "sent", "payload", "status",
     "check"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_method_sends_its_request_and_returns_its_record(
        name: str, args: tuple, kwargs: dict, method: str, path: str, query: dict,
        sent: Any, payload: Any, status: int, check: Callable[[Any], bool]) -> None:
    server = Server(ok(payload, status))
    with make(server) as client:
        result = getattr(client, name)(*args, **kwargs)
    assert check(result), result
    request = server.last
    assert (request.method, request.url.path) == (method, path)
    assert dict(request.url.params) == query
    if name in ("health", "ready"):
        assert "authorization" not in request.headers
    else:
        assert request.headers["authorization"] == f"Bearer {KEY}"
    if sent is None:
        assert request.content == b""
    else:
        assert request.headers["content-type"] == "application/json"
        assert server.body() == sent


def test_check_builds_the_answer_from_text_and_question() -> None:
    server = Server(ok(report_json()))
    with make(server) as client:
        client.check("Metformin is first-line.", question="First-line drug?")
        sent = server.body()
        assert sent["text"] == "Metformin is first-line."
        assert sent["question"] == "First-line drug?"
        assert sent["id"] == Answer(text=sent["text"], question=sent["question"]).id
        # a question given with an Answer replaces its question, and its default id
        client.check(Answer(text="x"), question="q")
        assert server.body()["id"] == Answer(text="x", question="q").id
        client.check(Answer(text="x", id="mine"), question="q")
        assert (server.body()["id"], server.body()["question"]) == ("mine", "q")


def test_risk_names_plain_strings_and_returns_the_scores() -> None:
    scores = [{"unit_id": "t1", "granularity": "answer", "text": "a", "probability": 0.2},
              {"unit_id": "own", "granularity": "answer", "text": "b", "probability": 0.9}]
    server = Server(ok({"scores": scores}))
    with make(server) as client:
        result = client.risk(["a", RiskText(id="own", text="b", question="q")])
    assert server.last.url.path == "/v1/risk"
    assert server.body() == {"texts": [
        {"id": "t1", "text": "a", "question": None, "context": None},
        {"id": "own", "text": "b", "question": "q", "context": None}]}
    assert all(isinstance(s, RiskScore) for s in result)
    assert [s.probability for s in result] == [0.2, 0.9]


def test_run_report_html_returns_the_page() -> None:
    page = "<!doctype html><title>run r1</title>"
    server = Server(httpx.Response(200, text=page, headers={"content-type": "text/html"}))
    with make(server) as client:
        assert client.run_report_html("r1") == page
    assert server.last.url.path == "/v1/runs/r1/report"


def test_ids_stay_one_path_segment_and_the_base_path_is_kept() -> None:
    server = Server(ok(job_json()))
    with Client(BASE + "/api/", KEY, transport=httpx.MockTransport(server)) as client:
        client.job("../keys")
        client.job(Job.model_validate(job_json(job_id="j9")))
    assert server.requests[0].url.raw_path == b"/api/v1/jobs/..%2Fkeys"
    assert server.requests[1].url.path == "/api/v1/jobs/j9"


def test_not_ready_is_a_readiness_not_an_error() -> None:
    server = Server(ok({"ready": False, "checks": {"kb": "missing"}}, 503))
    with make(server) as client:
        ready = client.ready()
    assert ready.ready is False and ready.checks == {"kb": "missing"}
    # a 503 that is an error, not a readiness, is raised
    server = Server(ok(error_json("unavailable", "shutting down"), 503))
    with make(server) as client, pytest.raises(ServiceError) as caught:
        client.ready()
    assert (caught.value.status, caught.value.code) == (503, "unavailable")


def test_requests_that_do_not_validate_fail_before_sending() -> None:
    server = Server(ok(job_json()))
    with make(server) as client:
        with pytest.raises(ValueError):
            client.submit_check([])
        with pytest.raises(ValueError):
            client.jobs(status="finished")
        with pytest.raises(ValueError):
            client.create_key("x", role="root")
    assert server.requests == []


# ----------------------------------------------------------------------- errors


def test_the_error_shape_becomes_a_service_error() -> None:
    detail = [{"loc": ["body", "text"], "msg": "Field required", "type": "missing"}]
    server = Server(ok(error_json("invalid_input", "the body is not an Answer", detail), 422))
    with make(server) as client, pytest.raises(ServiceError) as caught:
        client.check("x")
    error = caught.value
    assert isinstance(error, MedverifyError)
    assert (error.status, error.code, error.message) == (422, "invalid_input",
                                                         "the body is not an Answer")
    assert error.detail == detail
    assert "the body is not an Answer" in str(error) and "422" in str(error)


@pytest.mark.parametrize(("status", "code"), [(401, "unauthorized"), (403, "forbidden"),
                                              (404, "not_found"), (409, "not_configured")])
def test_error_codes_pass_through(status: int, code: str) -> None:
    server = Server(ok(error_json(code, "no"), status))
    with make(server) as client, pytest.raises(ServiceError) as caught:
        client.risk(["a"])
    assert (caught.value.status, caught.value.code, caught.value.detail) == (status, code, None)
    assert not isinstance(caught.value, RateLimited)


def test_a_non_json_error_keeps_the_status_and_the_start_of_the_body() -> None:
    body = "<html>Bad gateway" + "x" * 300 + "TAIL</html>"
    server = Server(httpx.Response(502, text=body, headers={"content-type": "text/html"}))
    with make(server) as client, pytest.raises(ServiceError) as caught:
        client.job("j1")
    error = caught.value
    assert (error.status, error.code) == (502, "http_error")
    assert "<html>Bad gateway" in error.message and "TAIL" not in error.message
    assert "GET /v1/jobs/j1" in error.message and "502" in str(error)
    # FastAPI's own {"detail": ...} shape is not the service's: shown as it came
    server = Server(ok({"detail": "Method Not Allowed"}, 405))
    with make(server) as client, pytest.raises(ServiceError) as caught:
        client.keys()
    assert caught.value.code == "http_error" and "Method Not Allowed" in caught.value.message


@pytest.mark.parametrize("response", [
    ok({"id": "j1"}),  # a record with fields missing
    httpx.Response(200, text="not json"),
    ok([job_json()]),  # a list where one record was expected
])
def test_a_response_that_is_not_the_record_is_a_bad_response(response: httpx.Response) -> None:
    with make(Server(response)) as client, pytest.raises(ServiceError) as caught:
        client.job("j1")
    assert (caught.value.status, caught.value.code) == (200, "bad_response")
    assert "GET /v1/jobs/j1" in caught.value.message


def test_a_report_page_that_is_not_html_is_a_bad_response() -> None:
    with make(Server(ok({"a": 1}))) as client, pytest.raises(ServiceError) as caught:
        client.run_report_html("r1")
    assert caught.value.code == "bad_response"


@pytest.mark.parametrize(("exc", "code"), [
    (httpx.ConnectError("connection refused"), "unreachable"),
    (httpx.ConnectTimeout("timed out"), "unreachable"),
    (httpx.ReadTimeout("timed out"), "timeout"),
    (httpx.RemoteProtocolError("peer closed"), "unreachable"),
])
def test_no_answer_is_a_service_error(exc: Exception, code: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    with make(Server(handler)) as client, pytest.raises(ServiceError) as caught:
        client.health()
    assert (caught.value.status, caught.value.code) == (None, code)
    assert caught.value.__cause__ is exc
    if code == "unreachable" and isinstance(exc, httpx.ConnectError):
        assert BASE in caught.value.message and "medverify serve" in caught.value.message


# ----------------------------------------------------------------------- 429


def test_429_is_retried_after_its_retry_after(sleeps: list[float]) -> None:
    limited = ok(error_json("rate_limited", "slow down"), 429, **{"Retry-After": "2"})
    server = Server(limited, limited, ok(report_json()))
    with make(server) as client:
        report = client.check("x")
    assert isinstance(report, Report)
    assert sleeps == [2.0, 2.0]
    assert len(server.requests) == 3
    assert server.body(0) == server.body(2)  # the same request again


def test_429_retries_run_out_into_rate_limited(sleeps: list[float]) -> None:
    limited = ok(error_json("rate_limited", "slow down"), 429, **{"Retry-After": "7"})
    server = Server(limited)
    with make(server, retries_429=2) as client, pytest.raises(RateLimited) as caught:
        client.job("j1")
    error = caught.value
    assert isinstance(error, ServiceError)
    assert (error.status, error.code, error.retry_after) == (429, "rate_limited", 7.0)
    assert sleeps == [7.0, 7.0] and len(server.requests) == 3


def test_retry_after_is_capped_and_defaulted(sleeps: list[float]) -> None:
    server = Server(ok(error_json("rate_limited", "x"), 429, **{"Retry-After": "3600"}),
                    httpx.Response(429, text="busy"),  # no Retry-After, not JSON
                    ok(error_json("rate_limited", "x"), 429, **{"Retry-After": "soon"}),
                    ok(job_json()))
    with make(server) as client:
        client.job("j1")
    assert sleeps == [60.0, 1.0, 1.0]


def test_retry_after_as_an_http_date(sleeps: list[float]) -> None:
    past = "Wed, 21 Oct 2015 07:28:00 GMT"
    soon = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=30),
                                       usegmt=True)
    server = Server(ok(error_json("rate_limited", "x"), 429, **{"Retry-After": past}),
                    ok(error_json("rate_limited", "x"), 429, **{"Retry-After": soon}),
                    ok(job_json()))
    with make(server) as client:
        client.job("j1")
    assert sleeps[0] == 0.0  # a date already past: no wait (and never a negative one)
    assert 20.0 < sleeps[1] <= 30.0


def test_no_retries_raises_at_once(sleeps: list[float]) -> None:
    server = Server(httpx.Response(429, text="busy"))
    with make(server, retries_429=0) as client, pytest.raises(RateLimited) as caught:
        client.job("j1")
    assert sleeps == [] and len(server.requests) == 1
    assert (caught.value.code, caught.value.retry_after) == ("http_error", None)


def test_503_overloaded_raises_at_once_without_a_retry(sleeps: list[float]) -> None:
    busy = ok(error_json("overloaded", "no check slot came free within 5 s; retry after 3 s"),
              503, **{"Retry-After": "3"})
    server = Server(busy, ok(report_json()))  # a retry would succeed: none is made
    with make(server) as client, pytest.raises(Overloaded) as caught:
        client.check("x")
    error = caught.value
    assert isinstance(error, ServiceError) and not isinstance(error, RateLimited)
    assert (error.status, error.code, error.retry_after) == (503, "overloaded", 3.0)
    assert len(server.requests) == 1 and sleeps == []


def test_other_503s_stay_plain_service_errors(sleeps: list[float]) -> None:
    server = Server(ok(error_json("not_ready", "the KB did not load"), 503,
                       **{"Retry-After": "3"}), httpx.Response(503, text="proxy busy"))
    with make(server) as client:
        for _ in range(2):
            with pytest.raises(ServiceError) as caught:
                client.check("x")
            assert type(caught.value) is ServiceError and caught.value.status == 503
    assert len(server.requests) == 2 and sleeps == []


def test_the_async_client_raises_overloaded_at_once_too() -> None:
    server = Server(ok(error_json("overloaded", "busy"), 503, **{"Retry-After": "2"}),
                    ok(report_json()))

    async def go() -> None:
        async with amake(server) as client:
            await client.check("x")

    with pytest.raises(Overloaded) as caught:
        asyncio.run(go())
    assert caught.value.retry_after == 2.0 and len(server.requests) == 1


# ----------------------------------------------------------------------- wait


def test_wait_polls_until_a_terminal_state(sleeps: list[float]) -> None:
    server = Server(ok(job_json("queued")), ok(job_json("running")),
                    ok(error_json("rate_limited", "x"), 429, **{"Retry-After": "1"}),
                    ok({**job_json("done"), "result": {"kind": "check",
                                                       "reports": [report_json()]}}))
    with make(server) as client:
        job = client.wait("j1", poll_s=0.25)
    assert job.status is JobStatus.DONE
    assert isinstance(job.result.reports[0], Report)  # type: ignore[union-attr]
    assert sleeps == [0.25, 0.25, 1.0]
    assert {r.url.path for r in server.requests} == {"/v1/jobs/j1"}


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_wait_stops_at_failed_and_cancelled(status: str, sleeps: list[float]) -> None:
    with make(Server(ok(job_json(status)))) as client:
        assert client.wait(Job.model_validate(job_json())).status == status
    assert sleeps == []


def test_wait_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(client_module, "_sleep", sleep)
    monkeypatch.setattr(client_module, "_clock", lambda: now[0])
    server = Server(ok(job_json("running")))
    with make(server) as client, pytest.raises(WaitTimeout) as caught:
        client.wait("j1", poll_s=2.0, timeout_s=5.0)
    error = caught.value
    assert isinstance(error, ServiceError) and isinstance(error, TimeoutError)
    assert error.code == "wait_timeout" and error.status is None
    assert error.job.status is JobStatus.RUNNING
    assert "j1" in error.message and "running" in error.message
    assert slept == [2.0, 2.0, 1.0]  # the last pause ends at the deadline
    assert len(server.requests) == 4  # polled once more at the deadline


def test_wait_rejects_a_pause_of_zero() -> None:
    with make(Server(ok(job_json()))) as client, pytest.raises(ValueError):
        client.wait("j1", poll_s=0)


# ----------------------------------------------------------------------- the client itself


def test_the_key_is_not_in_the_repr_and_close_closes() -> None:
    client = make(Server(ok(job_json())))
    assert KEY not in repr(client) and BASE in repr(client)
    with client:
        pass
    assert client._http.is_closed
    with pytest.raises(ValueError):
        Client(BASE, KEY, retries_429=-1)


def test_without_a_key_no_authorization_is_sent() -> None:
    server = Server(ok(error_json("unauthorized", "send a key"), 401))
    with Client(BASE, None, transport=httpx.MockTransport(server)) as client, \
            pytest.raises(ServiceError) as caught:
        client.keys()
    assert "authorization" not in server.last.headers
    assert caught.value.code == "unauthorized"


def test_the_package_exports_the_client_lazily() -> None:
    assert medverify.Client is Client and medverify.AsyncClient is AsyncClient
    assert medverify.ServiceError is ServiceError and medverify.RateLimited is RateLimited
    code = ("import sys, medverify; "
            "print(sorted(m for m in sys.modules if m in ('medverify.client', 'httpx') "
            "or m.startswith('medverify.service')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


# ----------------------------------------------------------------------- async


def amake(server: Server, **options: Any) -> AsyncClient:
    return AsyncClient(BASE, KEY, transport=httpx.MockTransport(server), **options)


def test_async_methods_send_the_same_requests() -> None:
    server = Server(ok({"status": "ok", "version": "1"}), ok(report_json()),
                    ok(job_json(), 202), ok([key_json()]),
                    ok({"key": key_json(role="reviewer"), "secret": "s"}, 201))

    async def go() -> list[Any]:
        async with amake(server) as client:
            return [await client.health(), await client.check("x", question="q"),
                    await client.submit_check(["y"]), await client.keys(),
                    await client.create_key("r", role="reviewer")]

    health, report, job, keys, new = asyncio.run(go())
    assert isinstance(health, Health) and isinstance(report, Report)
    assert isinstance(job, Job) and isinstance(keys[0], KeyInfo)
    assert new.key.role is Role.REVIEWER
    assert [(r.method, r.url.path) for r in server.requests] == [
        ("GET", "/healthz"), ("POST", "/v1/check"), ("POST", "/v1/jobs/check"),
        ("GET", "/v1/keys"), ("POST", "/v1/keys")]
    assert "authorization" not in server.requests[0].headers
    assert server.requests[1].headers["authorization"] == f"Bearer {KEY}"
    assert server.body(1)["question"] == "q"
    assert server.body(4) == {"name": "r", "role": "reviewer"}


def test_async_review_methods_send_the_same_requests() -> None:
    server = Server(ok([item_json()]), ok(item_json()), ok(item_json("closed", "FACT")),
                    ok(loop_json()))

    async def go() -> list[Any]:
        async with amake(server) as client:
            return [await client.review_items(status="open", limit=10),
                    await client.review_item("rv/1"),
                    await client.label("rv-1", "FACT", source_url="https://example.org/m"),
                    await client.review_progress()]

    items, item, labelled, progress = asyncio.run(go())
    assert isinstance(items[0], ReviewItem) and isinstance(item, ReviewItem)
    assert labelled.final_label is ReviewLabel.FACT and progress.total.kb_added == 1
    assert [(r.method, r.url.raw_path.decode().split("?")[0]) for r in server.requests] == [
        ("GET", "/v1/review/items"), ("GET", "/v1/review/items/rv%2F1"),
        ("POST", "/v1/review/items/rv-1/labels"), ("GET", "/v1/review/progress")]
    assert dict(server.requests[0].url.params) == {"status": "open", "limit": "10"}
    assert server.body(2)["label"] == "FACT"


def test_a_label_that_does_not_validate_fails_before_sending() -> None:
    server = Server(ok(item_json()))
    with make(server) as client, pytest.raises(ValueError):
        client.label("rv-1", "MAYBE")
    with make(server) as client, pytest.raises(ValueError):
        client.review_items(status="pending")
    assert server.requests == []


def test_async_retries_429_and_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    async def asleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(client_module, "_asleep", asleep)
    server = Server(ok(error_json("rate_limited", "x"), 429, **{"Retry-After": "3"}),
                    ok(job_json("running")), ok(job_json("done")))

    async def go() -> Job:
        async with amake(server) as client:
            return await client.wait("j1", poll_s=0.1)

    assert asyncio.run(go()).status is JobStatus.DONE
    assert slept == [3.0, 0.1]


def test_async_errors() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    async def go(server: Server) -> None:
        async with amake(server, retries_429=0) as client:
            await client.job("j1")

    with pytest.raises(ServiceError) as caught:
        asyncio.run(go(Server(ok(error_json("not_found", "no job j1"), 404))))
    assert (caught.value.status, caught.value.code) == (404, "not_found")
    with pytest.raises(RateLimited):
        asyncio.run(go(Server(ok(error_json("rate_limited", "x"), 429))))
    with pytest.raises(ServiceError) as caught:
        asyncio.run(go(Server(refuse)))
    assert caught.value.code == "unreachable"
    with pytest.raises(ServiceError) as caught:
        asyncio.run(go(Server(ok({"nope": 1}))))
    assert caught.value.code == "bad_response"
