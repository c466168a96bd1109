"""Request-scoped logs (issue 34): one line per request with its id (taken from X-Request-ID
when sane, else made up, and returned), key id, route, status, duration and claims; the
same id on every line written for that request, on its runs and on the runs of the jobs it
submitted. `medverify serve` with keys in use writes no secret anywhere in its output."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")

import httpx
from click.testing import CliRunner

from medverify.cli import main
from medverify.config import Config, ServiceSettings
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.service.logs import LOGGERS, configure_logging, mask_secrets, resolved_format
from medverify.service.observe import accepted_id
from medverify.store.access import KeyStore, Role
from medverify.store.jobs import JobStore
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge
from medverify.testing.service import ServiceProcess, ServiceThread, wait_until

DOCS = [Document(doc_id="metformin", title="Metformin",
                 text="Metformin is a first-line medicine for type 2 diabetes. The usual "
                 "starting dose is 500 mg once or twice daily with meals.")]
ANSWER = {"question": "How is type 2 diabetes treated?",
          "text": "Metformin is a first-line medicine for type 2 diabetes. The usual starting "
                  "dose is 5000 mg daily."}
HEX32 = re.compile(r"[0-9a-f]{32}")


def _kb(tmp: Path) -> Path:
    with KnowledgeBase.create(tmp / "kb", embedder="hash") as kb:
        kb.ingest(DOCS)
    return tmp / "kb"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The service's log lines as JSON, at debug, into a buffer (restored afterwards)."""
    saved = {name: (logging.getLogger(name).level, logging.getLogger(name).propagate,
                    list(logging.getLogger(name).handlers)) for name in LOGGERS}
    stream = io.StringIO()
    configure_logging(ServiceSettings(log_level="debug", log_format="json"), stream)
    yield stream
    for name, (level, propagate, handlers) in saved.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.propagate = propagate
        logger.handlers[:] = handlers


def test_the_id_is_taken_when_sane() -> None:
    assert accepted_id("abc-123_x.y:z") == "abc-123_x.y:z"
    for bad in (None, "", "has space", "x" * 65, "-leading-dash", "ünïcode", "a\tb"):
        assert HEX32.fullmatch(accepted_id(bad)), bad
    assert accepted_id("x" * 64) == "x" * 64
    assert accepted_id(None) != accepted_id(None)


def test_the_format_is_text_on_a_terminal_and_json_otherwise() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    auto = ServiceSettings()
    assert resolved_format(auto, Terminal()) == "text"
    assert resolved_format(auto, io.StringIO()) == "json"
    assert resolved_format(ServiceSettings(log_format="json"), Terminal()) == "json"
    stream = Terminal()
    handler = configure_logging(auto, stream)
    try:
        logging.getLogger("medverify.service.access").info(
            "request", extra={"fields": {"route": "/v1/check", "status": 200}})
    finally:
        for name in LOGGERS:
            logging.getLogger(name).removeHandler(handler)
            logging.getLogger(name).propagate = True
    line = stream.getvalue()
    assert " INFO medverify.service.access [None] request route=/v1/check status=200" in line
    assert mask_secrets("key mvk_0123456789ab_SECRETsecret-_x1 ok") == "key mvk_0123456789ab_*** ok"


def test_every_line_of_a_request_carries_its_id(tmp_path: Path,
                                                 captured: io.StringIO) -> None:
    register_fake("logs", ScriptedProvider(scripted_judge(keyword_rule(
        supported="first-line", contradicted="5000 mg"))))
    config = Config(kb=_kb(tmp_path), store=tmp_path / "runs.db", cache_path=tmp_path / "c.db",
                    model="fake:logs", decomposer="rules",
                    service={"job_poll_s": 0.02, "heartbeat_s": 0.05})
    with RunStore(config.store_path) as store:
        made = KeyStore(store).create("client", Role.CLIENT)
    auth = {"Authorization": f"Bearer {made.secret}"}
    try:
        with ServiceThread(config) as server, httpx.Client(base_url=server.url,
                                                           headers=auth) as http:
            given = http.post("/v1/check", json=ANSWER, headers={"X-Request-ID": "req-42"})
            made_up = http.post("/v1/check", json=ANSWER, headers={"X-Request-ID": "no way"})
            job = http.post("/v1/jobs/check", json={"answers": [ANSWER]},
                            headers={"X-Request-ID": "job-req-7"}).json()
            assert wait_until(lambda: http.get(f"/v1/jobs/{job['id']}").json()["status"]
                              == "done", 30.0)
            missing = httpx.get(server.url + "/v1/runs/nope", headers={"X-Request-ID": "r-404"})
    finally:
        unregister_fake("logs")
    assert given.headers["x-request-id"] == "req-42"
    assert HEX32.fullmatch(made_up.headers["x-request-id"])
    assert missing.status_code == 401 and missing.headers["x-request-id"] == "r-404"
    lines = [json.loads(line) for line in captured.getvalue().splitlines()]
    access = {line["request_id"]: line for line in lines if line["message"] == "request"}
    first = access["req-42"]
    assert (first["route"], first["method"], first["status"], first["key_id"]) == (
        "/v1/check", "POST", 200, made.key.id)
    assert first["claims"] == 2 and first["categories"] == {"FACT": 1, "HALLUCINATION": 1}
    assert first["target"] == given.json()["run_id"] and first["duration_ms"] > 0
    assert access[made_up.headers["x-request-id"]]["status"] == 200
    refused = access["r-404"]
    assert (refused["route"], refused["status"], refused["error"], refused["key_id"]) == (
        "/v1/runs/{run_id}", 401, "unauthorized", None)
    ended = [line for line in lines if line["message"] == "job ended"]
    assert [(e["request_id"], e["job_id"], e["status"], e["claims"]) for e in ended] == [
        ("job-req-7", job["id"], "done", 2)]
    # lines written while serving a request (the model calls, at debug) carry its id
    calls = [line for line in lines if line["logger"] == "medverify.llm"]
    assert len(calls) == 3
    assert {c["request_id"] for c in calls} == {"req-42", made_up.headers["x-request-id"],
                                                "job-req-7"}
    with RunStore(config.store_path) as store:
        assert store.get_run(given.json()["run_id"]).request_id == "req-42"
        row = JobStore(store).get(job["id"])
        assert row.request_id == "job-req-7"
        assert store.get_run(row.run_id or "").request_id == "job-req-7"


def test_an_unhandled_error_is_logged_with_the_id(tmp_path: Path,
                                                 captured: io.StringIO) -> None:
    from fastapi.testclient import TestClient

    from medverify.service.app import create_app

    config = Config(kb=_kb(tmp_path), store=tmp_path / "runs.db")
    with TestClient(create_app(config)) as client:
        def broken() -> dict[str, str]:
            raise RuntimeError("a bug")

        client.app.state.service.readiness = broken  # type: ignore[attr-defined]
        response = client.get("/readyz", headers={"X-Request-ID": "bug-1"})
        metrics = client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert response.status_code == 500 and response.headers["x-request-id"] == "bug-1"
    assert response.json()["error"]["code"] == "internal" and "RuntimeError" in response.text
    assert metrics.status_code == 401
    lines = [json.loads(line) for line in captured.getvalue().splitlines()]
    [error] = [line for line in lines if line["message"] == "unhandled error"]
    assert error["request_id"] == "bug-1" and "RuntimeError: a bug" in error["exception"]
    [access] = [line for line in lines if line.get("route") == "/readyz"]
    assert (access["request_id"], access["status"], access["error"]) == ("bug-1", 500,
                                                                         "internal")


def _cli(store: Path, *args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--store", str(store)])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_no_secret_in_any_output_of_the_service(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    secrets = {role: json.loads(_cli(store, "keys", "create", role, "--role", role, "--json"))
               for role in ("client", "reviewer", "admin")}
    revoked = json.loads(_cli(store, "keys", "create", "old", "--json"))
    _cli(store, "keys", "revoke", revoked["key"]["id"])
    log = tmp_path / "serve.log"
    env = {"MEDVERIFY_SERVICE__LOG_LEVEL": "debug", "MEDVERIFY_SERVICE__LOG_FORMAT": "json"}
    service = ServiceProcess(kb=_kb(tmp_path), store=store, home=tmp_path / "home", env=env,
                             log=log)
    sent = _traffic(service, {r: s["secret"] for r, s in secrets.items()}, revoked["secret"])
    text = log.read_text("utf-8")
    every = [s["secret"] for s in secrets.values()] + [revoked["secret"]]
    for secret in every:
        token = secret.split("_", 2)[2]  # mvk_<key id>_<token>: the token may hold "_"
        assert secret not in text and token not in text
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    access = [line for line in lines if line.get("message") == "request"]
    assert all(HEX32.fullmatch(a["request_id"]) for a in access)
    probes = {"/healthz", "/readyz"}  # the start-up's polling, as often as it took
    assert len([a for a in access if a["route"] not in probes]) == sent
    key_ids = {a["key_id"] for a in access}
    assert {s["key"]["id"] for s in secrets.values()} <= key_ids
    assert any(line.get("logger", "").startswith("medverify") for line in lines)


def _traffic(service: ServiceProcess, secrets: dict[str, str], revoked: str) -> int:
    """Requests with every key, good and bad; returns how many were sent."""
    sent = 0
    with service:
        def call(method: str, path: str, **kwargs: Any) -> httpx.Response:
            nonlocal sent
            sent += 1
            return httpx.request(method, service.url + path, timeout=60, **kwargs)

        bearer = {r: {"Authorization": f"Bearer {s}"} for r, s in secrets.items()}
        assert call("POST", "/v1/check", json=ANSWER, headers=bearer["client"]).is_success
        assert call("POST", "/v1/check", json=ANSWER,
                    headers={"X-API-Key": secrets["client"]}).is_success
        assert call("GET", "/metrics", headers=bearer["admin"]).is_success
        assert call("GET", "/v1/keys", headers=bearer["admin"]).is_success
        assert call("GET", "/v1/review/items", headers=bearer["reviewer"]).is_success
        assert call("POST", "/v1/check", json=ANSWER,
                    headers={"Authorization": f"Bearer {revoked}"}).status_code == 401
        wrong = secrets["client"][:-4] + "XXXX"
        assert call("POST", "/v1/check", json=ANSWER,
                    headers={"Authorization": f"Bearer {wrong}"}).status_code == 401
        with httpx.Client(base_url=service.url) as browser:
            page = browser.get("/review/login")
            sent += 1
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert csrf is not None
            login = browser.post("/review/login", data={"csrf": csrf.group(1),
                                                        "key": secrets["reviewer"]})
            sent += 1
            assert login.status_code == 303, login.text  # logged in
        service.stop()  # SIGTERM: the log is complete
    return sent
