"""The KB generation a replica serves, in ``/readyz`` and ``/metrics``: the embedded KB's
generation through the app, and the fields and gauge a KB with an index per replica (a KB
on PostgreSQL) gets, with stand-ins for it. The real PostgreSQL replicas behind nginx are in
test_replicas_nginx.py (``database`` marker)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient
from prometheus_client import generate_latest

from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.service.app import create_app
from medverify.service.metrics import Checked, ServiceMetrics
from medverify.service.state import ServiceState
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge


class _ReplicaKB:
    """Stands in for a KB on PostgreSQL: a database generation and the replica's."""

    def __init__(self, generation: int, replica: int | None, down: bool = False) -> None:
        self._generation, self.replica_generation, self.down = generation, replica, down

    @contextmanager
    def reading(self) -> Iterator[None]:
        yield

    @property
    def generation(self) -> int:
        if self.down:
            raise ConnectionError("the database does not answer")
        return self._generation


class _Checker:
    def __init__(self, kb: object) -> None:
        self.kb = kb


def _state(kb: object | None) -> ServiceState:
    state = ServiceState.__new__(ServiceState)  # only the checker is read
    state.checker = None if kb is None else _Checker(kb)  # type: ignore[assignment]
    return state


def test_readyz_fields_of_a_replica_that_lags_or_cannot_read_the_database() -> None:
    assert _state(_ReplicaKB(7, 5)).kb_generations() == {
        "kb_generation": 7, "kb_replica_generation": 5, "kb_generation_lag": 2}
    assert _state(_ReplicaKB(7, None)).kb_generations() == {
        "kb_generation": 7, "kb_replica_generation": None, "kb_generation_lag": None}
    assert _state(_ReplicaKB(7, 7, down=True)).kb_generations() == {
        "kb_generation": None, "kb_replica_generation": 7, "kb_generation_lag": None}
    assert _state(None).kb_generations() == {
        "kb_generation": None, "kb_replica_generation": None, "kb_generation_lag": None}


def _samples(metrics: ServiceMetrics) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(metrics.registry).decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_replica_gauge_follows_the_index_after_checks_and_at_scrapes(
        tmp_path: Path) -> None:
    config = Config(kb=tmp_path / "no-kb", store=tmp_path / "runs.db")
    kb = _ReplicaKB(3, None)
    metrics = ServiceMetrics(config)
    metrics.watch_kb(kb)
    assert _samples(metrics)["medverify_knowledge_base_replica_generation"] == 0
    kb.replica_generation = 3
    metrics.exposition()  # a scrape reads it
    assert _samples(metrics)["medverify_knowledge_base_replica_generation"] == 3
    kb.replica_generation = 4
    metrics.checked(Checked.of([]), "request")  # so does every check
    assert _samples(metrics)["medverify_knowledge_base_replica_generation"] == 4


def test_an_embedded_kb_has_a_generation_and_no_replica_gauge(tmp_path: Path) -> None:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="m", title="Metformin",
                            text="Metformin is a first-line medicine for type 2 diabetes.")])
        generation = kb.generation
    register_fake("kbgen", ScriptedProvider(scripted_judge(keyword_rule(
        supported="first-line"))))
    with RunStore(tmp_path / "runs.db") as store:
        admin = KeyStore(store).create("admin", Role.ADMIN).secret
    config = Config(kb=tmp_path / "kb", store=tmp_path / "runs.db", model="fake:kbgen",
                    cache_path=tmp_path / "cache.db", decomposer="rules")
    try:
        with TestClient(create_app(config)) as client:
            ready: dict[str, Any] = client.get("/readyz").json()
            text = client.get("/metrics", headers={"Authorization": f"Bearer {admin}"}).text
    finally:
        unregister_fake("kbgen")
    assert ready["ready"] and ready["kb_generation"] == generation > 0
    assert ready["kb_replica_generation"] is None and ready["kb_generation_lag"] is None
    assert f"medverify_knowledge_base_generation {float(generation)}" in text
    assert "medverify_knowledge_base_replica_generation" not in text
