"""The HTTP service in process (FastAPI's test client runs its lifespan): auth, limits,
the one error shape, check, jobs, runs, the audit log. The real server on a loopback port
is in test_service_server.py."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

import httpx
from fastapi.testclient import TestClient

from medverify.client import Client, Overloaded
from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.service.app import create_app
from medverify.service.auth import TokenBucket
from medverify.service.refusals import RefusalTally
from medverify.store.access import AuditLog, KeyStore, Role
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge

DOCS = [Document(doc_id="metformin", title="Metformin",
                 text="Metformin is a first-line medicine for type 2 diabetes. The usual "
                 "starting dose is 500 mg once or twice daily with meals.")]
ANSWER = {"question": "How is type 2 diabetes treated?",
          "text": "Metformin is a first-line medicine for type 2 diabetes. "
                  "The usual starting dose is 5000 mg daily."}


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest(DOCS)
    provider = ScriptedProvider(scripted_judge(keyword_rule(supported="first-line",
                                                            contradicted="5000 mg")))
    register_fake("service", provider)
    with RunStore(tmp_path / "runs.db") as store:
        keys = KeyStore(store)
        secrets = {r: keys.create(f"{r.value} key", r).secret for r in Role}
    yield {"tmp": tmp_path, "provider": provider, "secrets": secrets}
    unregister_fake("service")


def _config(tmp: Path, **service: Any) -> Config:
    return Config(kb=tmp / "kb", store=tmp / "runs.db", cache_path=tmp / "cache.db",
                  model="fake:service", decomposer="rules",
                  service={"job_poll_s": 0.02, "heartbeat_s": 0.05, **service})


def _client(setup: dict[str, Any], run_jobs: bool = True, **service: Any) -> TestClient:
    return TestClient(create_app(_config(setup["tmp"], **service), run_jobs=run_jobs))


def _auth(setup: dict[str, Any], role: Role = Role.CLIENT) -> dict[str, str]:
    return {"Authorization": f"Bearer {setup['secrets'][role]}"}


def _error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert body["error"]["message"]
    return body["error"]  # type: ignore[no-any-return]


def test_health_needs_no_key_and_ready_says_what_is_loaded(setup: dict[str, Any]) -> None:
    with _client(setup) as client:
        assert client.get("/healthz").json()["status"] == "ok"
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["checks"]["kb"] == "ok"


def test_not_ready_without_a_kb(setup: dict[str, Any]) -> None:
    config = _config(setup["tmp"]).model_copy(update={"kb": setup["tmp"] / "missing"})
    with TestClient(create_app(config)) as client:
        assert client.get("/readyz").status_code == 503
        _error(client.post("/v1/check", json=ANSWER, headers=_auth(setup)), 503, "not_ready")


def test_check_returns_the_report_and_records_the_run(setup: dict[str, Any]) -> None:
    with _client(setup) as client:
        response = client.post("/v1/check", json=ANSWER, headers=_auth(setup))
        assert response.status_code == 200, response.text
        report = response.json()
        assert [r["category"] for r in report["results"]] == ["FACT", "HALLUCINATION"]
        assert report["usage"]["judge"]["calls"] >= 1
        run = client.get(f"/v1/runs/{report['run_id']}", headers=_auth(setup)).json()
        assert run["info"]["kind"] == "check" and len(run["reports"]) == 1
        html = client.get(f"/v1/runs/{report['run_id']}/report", headers=_auth(setup))
        assert html.status_code == 200 and "<html" in html.text.lower()
        other = client.get(f"/v1/runs/{report['run_id']}", headers=_auth(setup, Role.REVIEWER))
        _error(other, 404, "not_found")  # another key does not see this key's runs


@pytest.mark.parametrize(("headers", "code"), [
    ({}, "unauthorized"),
    ({"Authorization": "Bearer mvk_000000000000_wrong"}, "unauthorized"),
    ({"Authorization": "Basic abc"}, "unauthorized"),
])
def test_requests_without_a_valid_key_are_refused(setup: dict[str, Any],
                                                  headers: dict[str, str], code: str) -> None:
    with _client(setup) as client:
        _error(client.post("/v1/check", json=ANSWER, headers=headers), 401, code)


def test_a_revoked_key_and_a_client_calling_an_admin_endpoint(setup: dict[str, Any]) -> None:
    with _client(setup) as client:
        _error(client.get("/v1/keys", headers=_auth(setup)), 403, "forbidden")
        keys = client.get("/v1/keys", headers=_auth(setup, Role.ADMIN)).json()
        client_id = next(k["id"] for k in keys if k["role"] == "client")
        revoked = client.post(f"/v1/keys/{client_id}/revoke", headers=_auth(setup, Role.ADMIN))
        assert revoked.status_code == 200 and revoked.json()["revoked_at"]
        _error(client.post("/v1/check", json=ANSWER, headers=_auth(setup)), 401,
               "unauthorized")


@pytest.mark.parametrize(("body", "headers", "status", "code"), [
    (b"{not json", {"Content-Type": "application/json"}, 400, "invalid_json"),
    (b'{"text": "caf\xe9"}', {"Content-Type": "application/json"}, 400, "invalid_json"),
    (b'{"text": "x"}', {"Content-Type": "text/plain"}, 415, "unsupported_media_type"),
    (b'{"text": "x", "oops": 1}', {"Content-Type": "application/json"}, 422,
     "invalid_request"),
    (b'{"text": "   "}', {"Content-Type": "application/json"}, 422, "invalid_input"),
    (b'{"text": "' + b"a" * 3000 + b'"}', {"Content-Type": "application/json"}, 413,
     "too_large"),
])
def test_bad_bodies_get_a_clear_error_and_write_nothing(
        setup: dict[str, Any], body: bytes, headers: dict[str, str], status: int,
        code: str) -> None:
    with _client(setup, max_body_bytes=2048) as client:
        _error(client.post("/v1/check", content=body, headers={**headers, **_auth(setup)}),
               status, code)
    with RunStore(setup["tmp"] / "runs.db") as store:
        assert store.list_runs() == []


def test_the_rate_limit_answers_429_with_retry_after(setup: dict[str, Any]) -> None:
    with _client(setup, rate_per_minute=60, rate_burst=2) as client:
        codes = [client.get("/v1/jobs", headers=_auth(setup)).status_code for _ in range(3)]
        assert codes[:2] == [200, 200]
        limited = client.get("/v1/jobs", headers=_auth(setup))
        error = _error(limited, 429, "rate_limited")
        _retry_agrees(limited, error)


def _retry_agrees(response: Any, error: dict[str, Any]) -> int:
    """The whole seconds of ``Retry-After``, which the message says too (never "0.0 s")."""
    seconds = int(response.headers["Retry-After"])
    assert seconds >= 1 and f"retry after {seconds} s" in error["message"], error
    return seconds


def test_a_slow_model_times_out_cleanly_and_the_worker_stays_healthy(
        setup: dict[str, Any]) -> None:
    setup["provider"].delay_s = 5.0
    with _client(setup, request_timeout_s=1.0) as client:
        _error(client.post("/v1/check", json=ANSWER, headers=_auth(setup)), 504, "timeout")
        assert client.get("/healthz").status_code == 200
        [run] = client.portal.call(client.app.state.service.runs.list_runs)  # type: ignore
        # recorded as what happened: cut off, with the reason
        assert run.status == "interrupted" and "request_timeout_s" in (run.error or "")
        setup["provider"].delay_s = 0.0
        # another answer: the timed-out call may still be finishing in the model layer, and
        # an identical request would wait for it
        other = {**ANSWER, "text": "Metformin is a first-line medicine."}
        assert client.post("/v1/check", json=other, headers=_auth(setup)).status_code == 200


def _wait(client: TestClient, job_id: str, headers: dict[str, str]) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
        if job["status"] in ("done", "failed", "cancelled"):
            return job  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def test_a_batch_runs_as_a_job_with_progress_and_result(setup: dict[str, Any]) -> None:
    answers = [ANSWER, {**ANSWER, "text": "Metformin is a first-line medicine."}]
    with _client(setup) as client:
        submitted = client.post("/v1/jobs/check", json={"answers": answers},
                                headers=_auth(setup))
        assert submitted.status_code == 202 and submitted.json()["status"] == "queued"
        job = _wait(client, submitted.json()["id"], _auth(setup))
        assert job["status"] == "done", job
        assert job["progress"] == {"done": 2, "total": 2} and job["run_id"]
        assert job["result"]["kind"] == "check" and len(job["result"]["reports"]) == 2
        _error(client.get(f"/v1/jobs/{job['id']}", headers=_auth(setup, Role.REVIEWER)),
               404, "not_found")
        log = client.get("/v1/audit-log", headers=_auth(setup, Role.ADMIN)).json()
        assert any(e["action"] == "POST /v1/jobs/check" and e["target"] == job["id"]
                   and e["status"] == 202 for e in log)


def test_a_queued_job_is_cancelled_at_once(setup: dict[str, Any]) -> None:
    with _client(setup, run_jobs=False) as client:
        job = client.post("/v1/jobs/check", json={"answers": [ANSWER]},
                          headers=_auth(setup)).json()
        cancelled = client.post(f"/v1/jobs/{job['id']}/cancel", headers=_auth(setup)).json()
        assert cancelled["status"] == "cancelled"


def test_too_many_answers_in_one_job(setup: dict[str, Any]) -> None:
    with _client(setup, max_answers_per_job=1) as client:
        _error(client.post("/v1/jobs/check", json={"answers": [ANSWER, ANSWER]},
                           headers=_auth(setup)), 413, "too_large")


def test_risk_without_a_classifier_says_so(setup: dict[str, Any]) -> None:
    with _client(setup) as client:
        _error(client.post("/v1/risk", json={"texts": [{"id": "t", "text": "x"}]},
                           headers=_auth(setup)), 409, "not_configured")


def test_the_config_handed_to_workers_is_not_read_as_a_setting() -> None:
    assert Config.load(env={"MEDVERIFY_SERVE_CONFIG": "{}"}) == Config.load(env={})


# ----------------------------------------------------------------------- admission control


def _hold_slot(client: TestClient) -> Callable[[], None]:
    """Take the worker's only check slot (on the app's event loop); returns its release."""
    slots = client.app.state.service.check_slots.slots  # type: ignore[attr-defined]
    ticket = client.portal.call(slots.acquire)  # type: ignore[union-attr]
    return lambda: client.portal.call(slots.release, ticket)  # type: ignore[union-attr]


def test_a_check_that_finds_no_slot_in_time_gets_503_and_leaves_no_run(
        setup: dict[str, Any]) -> None:
    with _client(setup, max_concurrent_checks=1, queue_wait_s=0.3) as client:
        release = _hold_slot(client)
        started = time.monotonic()
        refused = client.post("/v1/check", json=ANSWER, headers=_auth(setup))
        waited = time.monotonic() - started
        _retry_agrees(refused, _error(refused, 503, "overloaded"))
        assert 0.3 <= waited < 5.0
        sent: list[str] = []

        def relay(request: httpx.Request) -> httpx.Response:  # the Python client, in process
            sent.append(request.url.path)
            got = client.request(request.method, request.url.path, content=request.content,
                                 headers=dict(request.headers))
            return httpx.Response(got.status_code, headers=dict(got.headers),
                                  content=got.content)

        with Client("http://testserver", setup["secrets"][Role.CLIENT],
                    transport=httpx.MockTransport(relay)) as api, \
                pytest.raises(Overloaded) as caught:
            api.check(ANSWER["text"], question=ANSWER["question"])
        assert caught.value.retry_after is not None and caught.value.retry_after >= 1
        assert sent == ["/v1/check"]  # refused once, not retried
        assert client.portal.call(client.app.state.service.runs.list_runs) == []  # type: ignore
        release()
        assert client.post("/v1/check", json=ANSWER, headers=_auth(setup)).status_code == 200
        assert len(client.portal.call(client.app.state.service.runs.list_runs)) == 1  # type: ignore


def test_the_timeout_counts_the_work_not_the_wait_for_a_slot(setup: dict[str, Any]) -> None:
    other = {**ANSWER, "text": "Metformin is a first-line medicine."}
    with _client(setup, max_concurrent_checks=1, queue_wait_s=20,
                 request_timeout_s=1.0) as client:
        assert client.post("/v1/check", json=other, headers=_auth(setup)).status_code == 200
        release = _hold_slot(client)
        timer = threading.Timer(1.5, release)  # longer than request_timeout_s
        timer.start()
        started = time.monotonic()
        response = client.post("/v1/check", json=ANSWER, headers=_auth(setup))
        timer.join()
        assert response.status_code == 200, response.text
        assert time.monotonic() - started >= 1.5


# ----------------------------------------------------------------------- pre-auth limits


def _from_peer(app: Any) -> Any:
    """``app`` seeing the client address a test names in ``X-Test-Peer``."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        peer = dict(scope.get("headers") or []).get(b"x-test-peer")
        if scope["type"] == "http" and peer:
            scope = {**scope, "client": (peer.decode(), 40000)}
        await app(scope, receive, send)

    return wrapped


def test_wrong_keys_from_one_address_are_throttled_and_logged_as_two_rows(
        setup: dict[str, Any]) -> None:
    app = create_app(_config(setup["tmp"], auth_failures_per_minute=6, auth_failure_burst=10))
    wrong = {"Authorization": "Bearer mvk_000000000000_wrongwrongwrongwrong",
             "X-Test-Peer": "10.0.0.1"}
    with TestClient(_from_peer(app)) as client:
        responses = [client.post("/v1/check", json=ANSWER, headers=wrong) for _ in range(200)]
        assert [r.status_code for r in responses[:10]] == [401] * 10
        assert {r.status_code for r in responses[10:]} == {429}
        _retry_agrees(responses[-1], _error(responses[-1], 429, "rate_limited"))
        elsewhere = client.post("/v1/check", json=ANSWER,
                                headers={**_auth(setup), "X-Test-Peer": "10.0.0.2"})
        assert elsewhere.status_code == 200, elsewhere.text
        # the address is refused before its key is read, a valid one included
        _error(client.post("/v1/check", json=ANSWER,
                           headers={**_auth(setup), "X-Test-Peer": "10.0.0.1"}),
               429, "rate_limited")
    with RunStore(setup["tmp"] / "runs.db") as store:
        anonymous = [e for e in AuditLog(store).list(1000) if e.key_id is None]
    assert len(anonymous) == 2, anonymous  # the first refusal, and the sum of the others
    first, summary = sorted(anonymous, key=lambda e: e.id)
    assert first.status == 401 and "10.0.0.1" in (first.detail or "")
    assert summary.action == "refused requests"
    assert "200 more refused request(s) from 10.0.0.1" in (summary.detail or "")
    # 9 more 401s, 190 more 429s and the valid key's 429
    assert "POST /v1/check -> 429: 191, POST /v1/check -> 401: 9" in (summary.detail or "")


def test_requests_with_a_valid_key_spend_nothing_of_the_address_budget(
        setup: dict[str, Any]) -> None:
    app = create_app(_config(setup["tmp"], auth_failures_per_minute=1, auth_failure_burst=2))
    peer = {"X-Test-Peer": "10.0.0.3"}
    with TestClient(_from_peer(app)) as client:
        assert {client.get("/v1/jobs", headers={**_auth(setup), **peer}).status_code
                for _ in range(10)} == {200}
        codes = [client.get("/v1/jobs", headers=peer).status_code for _ in range(3)]
        assert codes == [401, 401, 429]


def _login_form(client: TestClient, peer: str) -> dict[str, str]:
    """A fresh login form's fields (its double-submit token; the cookie stays on
    ``client``)."""
    page = client.get("/review/login", headers={"X-Test-Peer": peer})
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert page.status_code == 200 and found, page.text
    return {"csrf": found.group(1)}


def test_wrong_logins_on_the_review_page_spend_the_address_budget(
        setup: dict[str, Any]) -> None:
    burst = 5
    app = create_app(_config(setup["tmp"], auth_failures_per_minute=6,
                             auth_failure_burst=burst))
    peer = {"X-Test-Peer": "10.0.0.4"}
    with TestClient(_from_peer(app)) as client:
        form = _login_form(client, "10.0.0.4")
        wrong = [client.post("/review/login", data={**form, "key": f"mvk_0_wrong{n}"},
                             headers=peer, follow_redirects=False) for n in range(burst + 1)]
        assert [r.status_code for r in wrong] == [401] * burst + [429]
        limited = wrong[-1]
        seconds = int(limited.headers["Retry-After"])
        assert 1 <= seconds <= 10 and "text/html" in limited.headers["content-type"]
        assert f"try again in {seconds} s" in limited.text, limited.text
        # a limit is a limit: the right key from that address is refused too, and so are
        # its API requests (one budget per address)
        right = {**form, "key": setup["secrets"][Role.REVIEWER]}
        again = client.post("/review/login", data=right, headers=peer, follow_redirects=False)
        assert again.status_code == 429 and "mv_session" not in again.headers.get(
            "set-cookie", "")
        _error(client.post("/v1/check", json=ANSWER, headers={**_auth(setup), **peer}),
               429, "rate_limited")
        elsewhere = client.post("/review/login", data=right, follow_redirects=False,
                                headers={"X-Test-Peer": "10.0.0.5"})
        assert elsewhere.status_code == 303, elsewhere.text
    with RunStore(setup["tmp"] / "runs.db") as store:
        anonymous = sorted((e for e in AuditLog(store).list(1000) if e.key_id is None),
                           key=lambda e: e.id)
    assert [(e.action, e.status) for e in anonymous] == [
        ("POST /review/login", 401), ("refused requests", None)]
    assert "10.0.0.4" in (anonymous[0].detail or "")
    assert ("7 more refused request(s) from 10.0.0.4" in (anonymous[1].detail or "")
            and "POST /review/login -> 401: 4" in (anonymous[1].detail or "")
            and "POST /review/login -> 429: 2" in (anonymous[1].detail or "")
            and "POST /v1/check -> 429: 1" in (anonymous[1].detail or "")), anonymous[1]


def test_refusals_are_counted_per_address_and_window(tmp_path: Path) -> None:
    now = [0.0]
    with RunStore(tmp_path / "runs.db") as store:
        audit = AuditLog(store)
        tally = RefusalTally(audit, window_s=60, clock=lambda: now[0])
        for at, address in [(0, "a"), (5, "b"), (10, "a"), (20, "a"), (61, "a")]:
            now[0] = at
            tally.refused(address, "POST /v1/check", 401)
        rows = sorted(audit.list(), key=lambda e: e.id)
        assert [(e.action, e.status) for e in rows] == [
            ("POST /v1/check", 401), ("POST /v1/check", 401),  # a's and b's first
            ("refused requests", None), ("POST /v1/check", 401)]  # a's window closed, new one
        assert rows[2].detail is not None and rows[2].detail.startswith("2 more refused")
        tally.flush()  # b and a's new window counted nothing more: no summary rows
        assert len(audit.list()) == 4


def test_the_address_buckets_forget_addresses_that_have_refilled() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=1.0, burst=2, clock=lambda: now[0])
    for n in range(3000):
        bucket.take(f"10.0.{n // 256}.{n % 256}")
    assert len(bucket._tokens) == 3000  # none refilled yet: all kept
    now[0] = 10.0  # every bucket full again
    for n in range(1100):  # new addresses, until the table is due to be pruned
        bucket.take(f"10.1.{n // 256}.{n % 256}")
    assert len(bucket._tokens) <= 1100  # the 3000 refilled ones are forgotten
    assert bucket.due("10.9.9.9") == 0.0  # looking takes nothing
    assert bucket.take("10.9.9.9") == 0.0 and bucket.take("10.9.9.9") == 0.0
    assert bucket.take("10.9.9.9") == bucket.due("10.9.9.9") == 1.0  # the burst is spent
