"""Issue 34, done when: the sample alert rules (examples/prometheus/alerts.yml) fire when
the judge endpoint breaks; issue 43: checked by Prometheus's own promtool. The service runs
on a loopback port with the LLM judge at a local OpenAI-compatible server; a week of healthy
checks is the baseline, then healthy checks, then the endpoint answers 500 and the ERROR
share rises. /metrics is scraped between the phases; ``promtool check metrics`` lints every
scrape, and ``promtool test rules`` runs the shipped rules over the scrapes (one a minute):
none fires before, exactly MedverifyErrorShareHigh, MedverifyJudgeErrors and
MedverifyVerdictDrift after. Here the rules' ``for:`` durations are struck (two scrapes
cannot last 5 minutes): the unit tests in examples/prometheus/tests check them
(tests/service/test_promtool.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
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
from medverify.testing.service import ServiceThread
from promtool_runner import EXAMPLES, input_series, run_promtool, series_of

pytestmark = pytest.mark.promtool

RULES = EXAMPLES / "alerts.yml"
FIRING = ("MedverifyErrorShareHigh", "MedverifyJudgeErrors", "MedverifyVerdictDrift")
PER_PHASE = 12


def rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text("utf-8"))["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]
            if "alert" in rule}


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


@dataclass(frozen=True)
class Scrapes:
    """/metrics before (a day-old baseline), after healthy checks, after broken ones."""

    quiet: str
    healthy: str
    broken: str
    endpoint_calls: int


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory: pytest.TempPathFactory) -> Scrapes:
    tmp_path = tmp_path_factory.mktemp("alerts")
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
        with ServiceThread(config) as server:
            def scrape() -> str:
                response = httpx.get(f"{server.url}/metrics", headers=admin, timeout=30)
                assert response.status_code == 200, response.text
                return response.text

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
        return Scrapes(quiet, healthy, broken, len(endpoint.calls))


def test_promtool_check_metrics_finds_nothing_on_a_live_scrape(scrapes: Scrapes) -> None:
    for text in (scrapes.quiet, scrapes.healthy, scrapes.broken):
        result = run_promtool("check", "metrics", stdin=text)
        assert (result.returncode, result.stdout + result.stderr) == (0, "")
    assert "medverify_knowledge_base_documents" in scrapes.broken  # the renamed KB gauges


def test_the_scrapes_count_what_broke(scrapes: Scrapes) -> None:
    samples = series_of(scrapes.broken)

    def total(pattern: str) -> float:
        return sum(v for name, v in samples.items() if re.fullmatch(pattern, name))

    assert total(r'medverify_model_calls_total\{.*outcome="error".*') == PER_PHASE
    assert total(r"medverify_model_retries_total\{.*") == PER_PHASE  # max_retries 1
    assert total(r'medverify_drift_share\{rate="ERROR"\}') == 0.5  # 12 of 24 in the window
    assert scrapes.endpoint_calls == 3 * PER_PHASE + PER_PHASE  # the broken ones tried twice


def test_promtool_fires_exactly_the_judge_alerts_after_the_endpoint_breaks(
        scrapes: Scrapes, tmp_path: Path) -> None:
    text = RULES.read_text("utf-8")
    (tmp_path / "alerts.yml").write_text(re.sub(r"(?m)^\s+for: \S+\n", "", text), "utf-8")
    model = _failing_judge_model(scrapes.broken)
    firing = {"MedverifyErrorShareHigh": [{}], "MedverifyJudgeErrors": [{"model": model}],
              "MedverifyVerdictDrift": [{"rate": "ERROR"}, {"rate": "ESCALATE"}]}
    share = ('sum(increase(medverify_claims_total{category="ERROR"}[15m])) / '
             "sum(increase(medverify_claims_total[15m]))")
    spec = {"rule_files": ["alerts.yml"], "evaluation_interval": "1m", "tests": [
        {"name": "before: healthy checks", "interval": "1m",
         "input_series": input_series(scrapes.quiet, scrapes.healthy),
         "alert_rule_test": [_expect(name, []) for name in rules()]},
        {"name": "after: the judge endpoint answers 500", "interval": "1m",
         "input_series": input_series(scrapes.healthy, scrapes.broken),
         "alert_rule_test": [_expect(name, firing.get(name, [])) for name in rules()],
         "promql_expr_test": [{"expr": share, "eval_time": "1m",
                               "exp_samples": [{"labels": "{}", "value": 1}]}]}]}
    (tmp_path / "live.test.yml").write_text(yaml.safe_dump(spec, sort_keys=False), "utf-8")
    result = run_promtool("test", "rules", "live.test.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(firing) == set(FIRING)


def _failing_judge_model(exposition: str) -> str:
    """The model label of the judge calls that failed."""
    [model] = {m.group(1) for name, value in series_of(exposition).items() if value
               and (m := re.search(r'model="([^"]*)"', name))
               and 'stage="judge"' in name and 'outcome="error"' in name}
    return model


def _expect(name: str, instances: list[dict[str, str]]) -> dict[str, Any]:
    """A promtool alert_rule_test at the second scrape: ``name`` fires once per labels of
    ``instances`` (with the rule's labels and its annotations rendered), or not at all."""
    rule = rules()[name]
    return {"eval_time": "1m", "alertname": name, "exp_alerts": [
        {"exp_labels": {**rule.get("labels", {}), **labels},
         "exp_annotations": {key: _render(value, labels)
                             for key, value in rule.get("annotations", {}).items()}}
        for labels in instances]}


def _render(template: str, labels: dict[str, str]) -> str:
    rendered = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)
    assert "{{" not in rendered, f"a template this test cannot render: {template}"
    return rendered
