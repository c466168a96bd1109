"""GET /metrics from the real server on a loopback port (issue 34): after a scripted mix of
requests, checks, a job, a review label, an overload and refused keys, every counter says
what was sent; the exposition parses with prometheus_client's parser. Also: who may read
it, metrics off, metrics on a port of their own."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prometheus_client")
pytest.importorskip("uvicorn")

import httpx
from prometheus_client.parser import text_string_to_metric_families

from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.llm import Completion, TokenCount
from medverify.llm.base import ChatRequest
from medverify.records import Document
from medverify.store.access import KeyStore, Role
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge
from medverify.testing.service import ServiceThread, free_port, wait_until

DOCS = [Document(doc_id="metformin", title="Metformin",
                 text="Metformin is a first-line medicine for type 2 diabetes. The usual "
                 "starting dose is 500 mg once or twice daily with meals.")]
PROMPT_TOKENS, COMPLETION_TOKENS = 7, 11
JUDGE = scripted_judge(keyword_rule(supported="first-line", contradicted="5000 mg"))

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def answer(n: int) -> dict[str, str]:
    return {"question": "How is type 2 diabetes treated?",
            "text": f"In clinic {'abcdefghij'[n]}, metformin is a first-line medicine for type "
                    "2 diabetes. The usual starting dose is 5000 mg daily."}


def reply(request: ChatRequest) -> Completion:
    """The judge's reply with fixed token counts, so the token counters can be checked."""
    return Completion(text=JUDGE(request), model=request.model, finish_reason="stop",
                      usage=TokenCount(prompt_tokens=PROMPT_TOKENS,
                                       completion_tokens=COMPLETION_TOKENS))


def scrape(url: str, headers: dict[str, str] | None = None) -> Samples:
    response = httpx.get(url, headers=headers or {}, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in samples.items() if n == name and wanted <= have)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest(DOCS)
        generation = kb.generation
    provider = register_fake("metrics", ScriptedProvider(reply, name="metrics"))
    with RunStore(tmp_path / "runs.db") as store:
        keys = KeyStore(store)
        secrets = {r: keys.create(f"{r.value} key", r).secret for r in Role}
    yield {"tmp": tmp_path, "provider": provider, "secrets": secrets, "generation": generation}
    unregister_fake("metrics")


def config(tmp: Path, **service: Any) -> Config:
    return Config(kb=tmp / "kb", store=tmp / "runs.db", cache_path=tmp / "cache.db",
                  model="fake:metrics", decomposer="rules", ops={"refresh_s": 0},
                  arbitration={"hallucination": "ESCALATE"},  # items for the review queue
                  service={"job_poll_s": 0.02, "heartbeat_s": 0.05,
                           "auth_failures_per_minute": 60, "auth_failure_burst": 3,
                           "max_concurrent_checks": 1, "queue_wait_s": 0, **service})


class Mix:
    """The requests sent, and what the service answered."""

    def __init__(self, url: str, secrets: dict[Role, str]) -> None:
        self.url, self.secrets = url, secrets
        self.statuses: Counter[tuple[str, str, int]] = Counter()
        self.reports: list[dict[str, Any]] = []

    def send(self, method: str, route: str, path: str, role: Role | None = Role.CLIENT,
             **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.secrets[role]}"} if role else {}
        response = httpx.request(method, self.url + path, headers=headers, timeout=60, **kwargs)
        self.statuses[(method, route, response.status_code)] += 1
        return response

    def check(self, body: dict[str, Any], path: str = "/v1/check") -> httpx.Response:
        response = self.send("POST", "/v1/check", path, json=body)
        if response.status_code == 200:
            self.reports.append(response.json())
        return response


def _scripted_mix(mix: Mix, provider: ScriptedProvider) -> None:
    for n in range(3):
        assert mix.check(answer(n)).status_code == 200
    assert mix.check(answer(0)).status_code == 200  # the same text: a cache hit
    assert mix.check(answer(3), "/v1/check?detail=full").status_code == 200
    assert mix.check({"text": ""}).status_code == 422
    run_id = mix.reports[0]["run_id"]
    assert mix.send("GET", "/v1/runs/{run_id}", f"/v1/runs/{run_id}").status_code == 200
    assert mix.send("GET", "unmatched", "/no/such/page").status_code == 404
    job = mix.send("POST", "/v1/jobs/check", "/v1/jobs/check",
                   json={"answers": [answer(4), answer(5)]}).json()
    assert wait_until(lambda: mix.send("GET", "/v1/jobs/{job_id}", f"/v1/jobs/{job['id']}")
                      .json()["status"] == "done", 30.0)
    mix.reports += mix.send("GET", "/v1/jobs/{job_id}",
                            f"/v1/jobs/{job['id']}").json()["result"]["reports"]
    items = mix.send("GET", "/v1/review/items", "/v1/review/items", Role.REVIEWER).json()
    assert mix.send("POST", "/v1/review/items/{item_id}/labels",
                    f"/v1/review/items/{items[0]['id']}/labels", Role.REVIEWER,
                    json={"label": "HALLUCINATION"}).status_code == 200
    provider.delay_s = 0.6  # one check slot, no waiting: the second is refused with 503
    slow = threading.Thread(target=mix.check, args=(answer(6),))
    slow.start()
    time.sleep(0.25)
    assert mix.check(answer(7)).status_code == 503
    slow.join()
    provider.delay_s = 0.0
    for _ in range(3):
        assert mix.send("POST", "/v1/check", "/v1/check", None, json=answer(8)).status_code == 401
    assert mix.send("POST", "/v1/check", "/v1/check", None, json=answer(8)).status_code == 429
    time.sleep(1.2)  # the address's bucket refills (1 a second): the scrape's key is read


def test_the_counters_say_what_was_sent(setup: dict[str, Any]) -> None:
    provider = setup["provider"]
    with ServiceThread(config(setup["tmp"])) as server:
        mix = Mix(server.url, setup["secrets"])
        _scripted_mix(mix, provider)
        admin = {"Authorization": f"Bearer {setup['secrets'][Role.ADMIN]}"}
        samples = scrape(server.url + "/metrics", admin)
    for (method, route, status), n in mix.statuses.items():
        labels = {"route": route, "method": method, "status": str(status)}
        assert value(samples, "medverify_http_requests_total", **labels) == n, labels
        assert value(samples, "medverify_http_request_duration_seconds_count", **labels) == n
    assert mix.statuses[("POST", "/v1/check", 503)] == 1
    assert mix.statuses[("POST", "/v1/check", 429)] == 1
    assert value(samples, "medverify_admission_refusals_total", status="503",
                 code="overloaded") == 1
    assert value(samples, "medverify_admission_refusals_total", status="429",
                 code="rate_limited") == 1

    answered = mix.statuses[("POST", "/v1/check", 200)]
    assert value(samples, "medverify_answers_checked_total", source="request") == answered == 6
    assert value(samples, "medverify_answers_checked_total", source="job") == 2
    claims: Counter[tuple[str, str, str]] = Counter()
    for report in mix.reports:
        for r in report["results"]:
            decision = (r.get("arbitration") or {}).get("decision", "none")
            sure = {True: "sure", False: "not_sure", None: "unassessed"}[r.get("confident")]
            claims[(r["category"], decision, sure)] += 1
    assert sum(claims.values()) == 16 and {c for c, _, _ in claims} == {"FACT",
                                                                       "HALLUCINATION"}
    for (category, decision, sure), n in claims.items():
        assert value(samples, "medverify_claims_total", category=category, decision=decision,
                     confidence=sure) == n
    assert value(samples, "medverify_claims_total") == 16

    judge = {"model": "fake:metrics", "stage": "judge"}
    calls = len(provider.requests)
    assert calls == 7  # 8 answers checked, one from the cache
    assert value(samples, "medverify_model_calls_total", outcome="ok", **judge) == calls
    assert value(samples, "medverify_model_calls_total", outcome="cached", **judge) == 1
    assert value(samples, "medverify_model_call_duration_seconds_count", **judge) == calls
    assert value(samples, "medverify_model_tokens_total", kind="prompt",
                 **judge) == calls * PROMPT_TOKENS
    assert value(samples, "medverify_model_tokens_total", kind="completion",
                 **judge) == calls * COMPLETION_TOKENS
    assert value(samples, "medverify_model_errors_total") == 0

    assert value(samples, "medverify_jobs", kind="check", status="done") == 1
    assert value(samples, "medverify_jobs") == 1
    assert value(samples, "medverify_job_queue_depth") == 0
    assert value(samples, "medverify_jobs_finished_total", kind="check", status="done") == 1
    with RunStore(setup["tmp"] / "runs.db") as store:
        opened = sum(ReviewStore(store).counts().values())
    assert opened >= 1
    assert value(samples, "medverify_review_items_opened_total") == opened
    assert value(samples, "medverify_review_items_closed_total") == 1
    assert value(samples, "medverify_review_items", status="closed") == 1
    assert value(samples, "medverify_knowledge_base_documents") == 1
    assert value(samples, "medverify_knowledge_base_generation") == setup["generation"]
    assert value(samples, "medverify_store_up") == 1
    assert value(samples, "medverify_service_info", judge="llm", decomposer="rules",
                 model="fake:metrics") == 1
    assert value(samples, "medverify_drift_claims", period="window") == 16
    assert value(samples, "medverify_drift_share", rate="HALLUCINATION") == 0.5
    assert value(samples, "medverify_drift_drifted") == 0  # no baseline yet


def test_who_may_read_the_metrics_and_when_they_are_off(setup: dict[str, Any]) -> None:
    secrets = setup["secrets"]
    with ServiceThread(config(setup["tmp"])) as server:
        url = server.url + "/metrics"
        assert httpx.get(url).status_code == 401
        for role in (Role.CLIENT, Role.REVIEWER):
            refused = httpx.get(url, headers={"Authorization": f"Bearer {secrets[role]}"})
            assert refused.status_code == 403
    with ServiceThread(config(setup["tmp"], metrics=False)) as server:
        off = httpx.get(server.url + "/metrics",
                        headers={"Authorization": f"Bearer {secrets[Role.ADMIN]}"})
        assert off.status_code == 409 and off.json()["error"]["code"] == "not_configured"
        # requests still get their id without metrics
        assert httpx.get(server.url + "/healthz").headers["x-request-id"]


def test_metrics_on_a_port_of_their_own(setup: dict[str, Any]) -> None:
    port = free_port()
    with ServiceThread(config(setup["tmp"], metrics_port=port)) as server:
        admin = {"Authorization": f"Bearer {setup['secrets'][Role.ADMIN]}"}
        moved = httpx.get(server.url + "/metrics", headers=admin)
        assert moved.status_code == 404 and str(port) in moved.json()["error"]["message"]
        httpx.post(server.url + "/v1/check", json=answer(0),
                   headers={"Authorization": f"Bearer {setup['secrets'][Role.CLIENT]}"})
        samples = scrape(f"http://127.0.0.1:{port}/metrics")  # no key on this port
        assert value(samples, "medverify_answers_checked_total", source="request") == 1
        assert value(samples, "medverify_http_requests_total", route="/metrics",
                     status="404") == 1
    with pytest.raises(httpx.HTTPError):  # stopped with the service
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


def check_pids(log: Path) -> set[int]:
    """The processes whose JSON log lines answered /v1/check."""
    import json

    lines = [x for x in log.read_text().splitlines()[1:] if x.startswith("{")]
    return {line["pid"] for line in map(json.loads, lines) if line.get("route") == "/v1/check"}


# Two server processes, each loading the built-in verifier: 20-40 s on 2 busy cores, so
# `slow` (make test-slow, run by .ci/run).
@pytest.mark.slow
def test_several_workers_are_summed(tmp_path: Path) -> None:
    """`medverify serve --workers 2`: the library's multiprocess mode (a folder beside the
    store); a scrape of either worker, or of metrics_port served by the parent process,
    counts every worker's requests."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    from click.testing import CliRunner

    from medverify.cli import main
    from medverify.testing.service import ServiceProcess

    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest(DOCS)
    store = tmp_path / "runs.db"
    keys = {role: json.loads(CliRunner().invoke(main, [
        "keys", "create", role, "--role", role, "--json", "--store", str(store)]).stdout)
        ["secret"] for role in ("client", "admin")}
    port = free_port()
    log = tmp_path / "serve.log"
    service = ServiceProcess(kb=tmp_path / "kb", store=store, home=tmp_path / "home",
                             workers=2, log=log, env={
                                 "MEDVERIFY_SERVICE__METRICS_PORT": str(port),
                                 "MEDVERIFY_SERVICE__LOG_FORMAT": "json",
                                 "PROMETHEUS_MULTIPROC_DIR": ""})
    folder = tmp_path / "metrics" / str(service.port)
    folder.mkdir(parents=True)
    (folder / "counter_1.db").write_bytes(b"a previous run's counts")
    client = {"Authorization": f"Bearer {keys['client']}"}
    with service:
        def check(n: int) -> int:
            return httpx.post(service.url + "/v1/check", json=answer(n % 10), headers=client,
                              timeout=60).status_code

        sent = 0  # the kernel spreads connections over the workers as it likes: send
        with ThreadPoolExecutor(4) as pool:  # until both have answered (or 96 requests)
            while sent < 96 and (sent < 12 or len(check_pids(log)) < 2):
                assert list(pool.map(check, range(sent, sent + 12))) == [200] * 12
                sent += 12
        served = scrape(f"http://127.0.0.1:{port}/metrics")  # the parent, no key
        files = sorted(p.name for p in folder.glob("*.db"))
        service.stop()
    assert value(served, "medverify_answers_checked_total", source="request") == sent
    assert value(served, "medverify_http_requests_total", route="/v1/check",
                 status="200") == sent
    assert value(served, "medverify_store_up") == 1
    assert value(served, "medverify_service_info", judge="builtin", model="none") == 1
    assert "counter_1.db" not in files and len(files) >= 2
    assert len(check_pids(log)) == 2  # both workers answered checks; the scrape summed them
