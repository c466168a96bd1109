"""The ``medverify_sure_verdict*`` gauges of /metrics: sure verdicts clinicians labelled and
overturned over the last 28 days, per judge, read from a real run store at scrape time
(issue 42, item 3)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")

from medverify.config import Config, OpsSettings
from medverify.records import Category
from medverify.service.metrics import StoreCollector
from medverify.store.runs import RunStore
from ops.test_overturns import _queue

FACT = Category.FACT


def _samples(config: Config) -> dict[tuple[str, str], float]:
    return {(s.name, s.labels.get("judge", "")): s.value
            for family in StoreCollector(config).collect() for s in family.samples
            if s.name.startswith("medverify_sure_verdict")}


def test_the_gauges_count_sure_verdicts_per_judge(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    with RunStore(tmp_path / "runs.db") as store:
        _queue(store, "builtin", [(FACT, True, "audit", "FACT")] * 2 +
               [(FACT, True, "audit", "HALLUCINATION")] * 2, now - timedelta(days=2))
        _queue(store, "llm", [(FACT, True, "audit", "FACT")], now - timedelta(days=3))
        _queue(store, "old", [(FACT, True, "audit", "HALLUCINATION")], now - timedelta(days=30))
    config = Config(store=tmp_path / "runs.db", ops=OpsSettings(min_claims=3))
    samples = _samples(config)
    assert samples[("medverify_sure_verdicts_labelled", "builtin")] == 4
    assert samples[("medverify_sure_verdicts_overturned", "builtin")] == 2
    assert samples[("medverify_sure_verdict_precision", "builtin")] == 0.5
    assert samples[("medverify_sure_verdict_below_target", "builtin")] == 1
    assert samples[("medverify_sure_verdict_precision", "llm")] == 1.0
    assert samples[("medverify_sure_verdict_below_target", "llm")] == 0  # 1 label < 3
    assert ("medverify_sure_verdicts_labelled", "old") not in samples  # outside 28 days
    assert samples[("medverify_sure_verdict_precision_target", "")] == 0.7
    fewer = _samples(Config(store=tmp_path / "runs.db", ops=OpsSettings(min_claims=5)))
    assert fewer[("medverify_sure_verdict_below_target", "builtin")] == 0
