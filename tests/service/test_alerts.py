"""Issue 34, done when: the sample alert rules (examples/prometheus/alerts.yml) fire when
the judge endpoint breaks. The service runs on a loopback port with the LLM judge at a local
OpenAI-compatible server; a week of healthy checks is the baseline, then healthy checks,
then the endpoint answers 500 and the ERROR share rises. /metrics is scraped between the
phases and the rules' expressions are evaluated on the scrapes (no Prometheus server runs
here: medverify.testing.promql evaluates them; the rules' `for:` durations are not
applied)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prometheus_client")
pytest.importorskip("uvicorn")

import httpx
import yaml

from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore
from medverify.testing import FakeChatServer
from medverify.testing.fake_server import FakeResponse
from medverify.testing.judge import keyword_rule, scripted_judge
from medverify.testing.promql import Scrape, evaluate, fires
from medverify.testing.service import ServiceThread

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "examples" / "prometheus" / "alerts.yml"
FIRING = ("MedverifyErrorShareHigh", "MedverifyJudgeErrors", "MedverifyVerdictDrift")
PER_PHASE = 12


def rules() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text("utf-8"))["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


def test_the_sample_config_and_every_rule_can_be_read() -> None:
    config = yaml.safe_load((RULES.parent / "prometheus.yml").read_text("utf-8"))
    assert config["rule_files"] == ["alerts.yml"]
    [job] = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics" and job["authorization"]["type"] == "Bearer"
    empty = [Scrape(0.0, {}), Scrape(15.0, {})]
    for name, expr in rules().items():
        assert not fires(expr, empty), name  # parses, and nothing fires on nothing


class Judge:
    """The judge endpoint's behaviour: a scripted judge, or broken (HTTP 500)."""

    def __init__(self) -> None:
        self.broken = False
        self.judge = scripted_judge(keyword_rule(supported="first-line"))

    def __call__(self, body: dict[str, Any]) -> str | FakeResponse:
        return FakeResponse.error(500, message="upstream down") if self.broken else \
            self.judge(body)


def _check(url: str, secret: str, n: int) -> None:
    response = httpx.post(f"{url}/v1/check", timeout=60,
                          headers={"Authorization": f"Bearer {secret}"},
                          json={"text": f"Metformin is a first-line medicine for type 2 "
                                f"diabetes in clinic {n}."})
    assert response.status_code == 200, response.text


def _shift_back(store: Path, days: int) -> int:
    """Make the runs recorded so far look ``days`` old (a baseline week of history)."""
    with RunStore(store) as db:
        rows = db._db.execute("SELECT id, created_at FROM runs").fetchall()
        for run_id, created in rows:
            db._db.execute("UPDATE runs SET created_at = ? WHERE id = ?",
                           (created.replace(created[:10], _days_before(created[:10], days)),
                            run_id))
    return len(rows)


def _days_before(day: str, days: int) -> str:
    from datetime import date, timedelta

    return (date.fromisoformat(day) - timedelta(days=days)).isoformat()


def test_breaking_the_judge_endpoint_fires_the_alerts(tmp_path: Path) -> None:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="metformin", title="Metformin", text="Metformin is a "
                            "first-line medicine for type 2 diabetes.")])
    judge = Judge()
    with FakeChatServer(judge) as endpoint:
        config = Config(kb=tmp_path / "kb", store=tmp_path / "runs.db", decomposer="rules",
                        cache_path=tmp_path / "cache.db",
                        model=f"openai-compatible:judge@{endpoint.base_url}",
                        llm={"max_retries": 1, "backoff_s": 0, "cache": False},
                        ops={"refresh_s": 0, "min_claims": 10},
                        # the v1 queue: every ERROR escalated, unsure verdicts only flagged
                        arbitration={"escalation_budget": 1.0, "not_sure_clinical": "FLAG"})
        with RunStore(config.store_path) as store:
            keys = KeyStore(store)
            client = keys.create("chatbot", Role.CLIENT).secret
            admin = {"Authorization": f"Bearer {keys.create('prometheus', Role.ADMIN).secret}"}
        expressions = rules()
        with ServiceThread(config) as server:
            def scrape() -> Scrape:
                text = httpx.get(f"{server.url}/metrics", headers=admin, timeout=30).text
                return Scrape.parse(time.time(), text)

            for n in range(PER_PHASE):  # the baseline: made to look a day old
                _check(server.url, client, n)
            assert _shift_back(config.store_path, days=1) == PER_PHASE
            quiet = scrape()
            for n in range(PER_PHASE):  # healthy, in the window
                _check(server.url, client, 100 + n)
            healthy = scrape()
            judge.broken = True
            for n in range(PER_PHASE):  # the endpoint answers 500: every claim is ERROR
                _check(server.url, client, 200 + n)
            broken = scrape()

    before = [quiet, healthy]
    assert {name: fires(expr, before) for name, expr in expressions.items()} == dict.fromkeys(
        expressions, False)
    after = [healthy, broken]
    fired = {name for name, expr in expressions.items() if fires(expr, after)}
    assert fired == set(FIRING)
    share = evaluate('sum(increase(medverify_claims_total{category="ERROR"}[15m])) / '
                     "sum(increase(medverify_claims_total[15m]))", after)
    assert share == {frozenset(): 1.0}  # every claim since the healthy scrape
    drifted = evaluate(expressions["MedverifyVerdictDrift"], after)
    assert {dict(k)["rate"] for k in drifted} == {"ERROR", "ESCALATE"}
    window = evaluate('medverify_drift_share{rate="ERROR"}', after)
    assert list(window.values()) == [0.5]  # 12 of the 24 claims of the window
    calls = evaluate('medverify_model_calls_total{outcome="error"}', after)
    assert sum(calls.values()) == PER_PHASE
    retries = evaluate("medverify_model_retries_total", after)
    assert sum(retries.values()) == PER_PHASE  # max_retries 1: one retry each
    assert len(endpoint.calls) == 3 * PER_PHASE + PER_PHASE  # the broken ones tried twice
