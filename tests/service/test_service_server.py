"""The service as a user runs it: `medverify keys create`, `medverify serve` on a loopback
port (a real process, the built-in judge), the Python client; and a graceful shutdown that
puts a running job back in the queue."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("uvicorn")

from click.testing import CliRunner

from medverify.cli import main
from medverify.client import Client
from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.records import Answer, Document
from medverify.store.access import KeyStore, Role
from medverify.store.jobs import JobStatus, JobStore
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge
from medverify.testing.service import ServiceProcess, ServiceThread, wait_until

DOCS = [Document(doc_id="metformin", title="Metformin",
                 text="Metformin is a first-line medicine for type 2 diabetes.")]
TEXT = "Metformin is a first-line medicine for type 2 diabetes."


def _kb(tmp: Path) -> Path:
    with KnowledgeBase.create(tmp / "kb", embedder="hash") as kb:
        kb.ingest(DOCS)
    return tmp / "kb"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("served")
    kb, store = _kb(tmp), tmp / "runs.db"
    made = CliRunner().invoke(main, ["keys", "create", "tester", "--store", str(store),
                                     "--json"])
    assert made.exit_code == 0, made.output
    secret = json.loads(made.stdout)["secret"]
    service = ServiceProcess(kb=kb, store=store, home=tmp / "home", log=tmp / "serve.log")
    with service:
        yield {"url": service.url, "secret": secret, "service": service, "store": store}


def test_one_http_request_checks_an_answer(served: dict[str, Any]) -> None:
    response = httpx.post(f"{served['url']}/v1/check",
                          headers={"Authorization": f"Bearer {served['secret']}"},
                          json={"question": "What is metformin?", "text": TEXT}, timeout=60)
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["results"] and report["results"][0]["verdict"]["judge"].startswith("builtin")


def test_the_client_checks_submits_and_waits(served: dict[str, Any]) -> None:
    with Client(served["url"], served["secret"]) as client:
        assert client.ready().ready
        report = client.check(TEXT, question="What is metformin?")
        assert report.results and report.run_id
        job = client.wait(client.submit_check([TEXT, TEXT + " It is cheap."]), timeout_s=60)
        assert job.status is JobStatus.DONE and job.result is not None
        assert job.result.kind == "check" and len(job.result.reports) == 2
        assert client.run(job.run_id or "").info["kind"] == "check"


def test_openapi_page_documents_every_endpoint(served: dict[str, Any]) -> None:
    schema = httpx.get(f"{served['url']}/openapi.json", timeout=10).json()
    paths = set(schema["paths"])
    assert {"/v1/check", "/v1/audit", "/v1/factcheck", "/v1/risk", "/v1/jobs/{job_id}",
            "/v1/runs/{run_id}", "/v1/runs/{run_id}/report", "/healthz", "/readyz"} <= paths
    assert httpx.get(f"{served['url']}/docs", timeout=10).status_code == 200


def test_graceful_shutdown_puts_a_running_job_back_and_a_restart_finishes_it(
        tmp_path: Path) -> None:
    provider = register_fake("slow", ScriptedProvider(
        scripted_judge(keyword_rule(supported="first-line")), delay_s=3.0))
    try:
        config = Config(kb=_kb(tmp_path), store=tmp_path / "runs.db",
                        cache_path=tmp_path / "cache.db", model="fake:slow", decomposer="rules",
                        service={"shutdown_grace_s": 0.2, "job_poll_s": 0.02,
                                 "heartbeat_s": 0.1})
        with RunStore(config.store_path) as store:
            secret = KeyStore(store).create("t", Role.CLIENT).secret
        with ServiceThread(config) as server, Client(server.url, secret) as client:
            job = client.submit_check([Answer(text=TEXT)])
            assert wait_until(lambda: client.job(job).status is JobStatus.RUNNING, 20.0)
        with RunStore(config.store_path) as store:
            row = JobStore(store).get(job.id)
        assert row.status is JobStatus.QUEUED and row.error == "the server shut down"
        provider.delay_s = 0.0
        with ServiceThread(config) as server, Client(server.url, secret) as client:
            done = client.wait(job, timeout_s=30)
        assert done.status is JobStatus.DONE and done.attempts == 2
    finally:
        unregister_fake("slow")
