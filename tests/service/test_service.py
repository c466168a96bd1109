"""The HTTP service in process (FastAPI's test client runs its lifespan): auth, limits,
the one error shape, check, jobs, runs, the audit log. The real server on a loopback port
is in test_service_server.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.service.app import create_app
from medverify.store.access import KeyStore, Role
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
        assert int(limited.headers["Retry-After"]) >= 1 and "retry after" in error["message"]


def test_a_slow_model_times_out_cleanly_and_the_worker_stays_healthy(
        setup: dict[str, Any]) -> None:
    setup["provider"].delay_s = 5.0
    with _client(setup, request_timeout_s=1.0) as client:
        _error(client.post("/v1/check", json=ANSWER, headers=_auth(setup)), 504, "timeout")
        assert client.get("/healthz").status_code == 200
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
