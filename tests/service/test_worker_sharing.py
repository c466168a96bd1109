"""One service worker resolves its judge's name once and shares one judge and one
decomposer between its flows (check, fact-check, audit jobs): issue 44, item 3."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from medverify.config import Config
from medverify.decompose import DECOMPOSERS
from medverify.judge import JUDGES
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.service.state import ServiceState
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge


@pytest.fixture
def kb_path(tmp_path: Path) -> Path:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="metformin", title="Metformin",
                            text="Metformin is a first-line medicine for type 2 diabetes.")])
    return tmp_path / "kb"


@pytest.fixture
def fake_model() -> Iterator[str]:
    register_fake("sharing", ScriptedProvider(scripted_judge(keyword_rule(
        supported="first-line"))))
    yield "fake:sharing"
    unregister_fake("sharing")


def _counting(monkeypatch: pytest.MonkeyPatch, registry: Any, method: str) -> Counter[str]:
    """Count the calls of ``registry.<method>`` by the name asked for."""
    counts: Counter[str] = Counter()
    real: Callable[..., Any] = getattr(registry, method)

    def counted(name: str, *args: Any, **kwargs: Any) -> Any:
        counts[name] += 1
        return real(name, *args, **kwargs)

    monkeypatch.setattr(registry, method, counted)
    return counts


def _started(config: Config, monkeypatch: pytest.MonkeyPatch
             ) -> tuple[ServiceState, Counter[str], Counter[str]]:
    resolved = _counting(monkeypatch, JUDGES, "get")
    decomposers = _counting(monkeypatch, DECOMPOSERS, "create")
    state = ServiceState.open(config)
    state.load()
    return state, resolved, decomposers


def _config(tmp_path: Path, kb: Path, **fields: Any) -> Config:
    return Config(kb=kb, store=tmp_path / "runs.db", cache_path=tmp_path / "cache.db",
                  **fields)


def test_an_offline_worker_resolves_its_judge_once_and_shares_it(
        tmp_path: Path, kb_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state, resolved, decomposers = _started(_config(tmp_path, kb_path), monkeypatch)
    try:
        assert state.problems == {}
        assert resolved == {"builtin": 1}
        assert sum(decomposers.values()) == 1
        checker, factchecker = state.need_checker(), state.need_factchecker()
        auditor = state.auditor("job-1")
        assert factchecker.judge is checker.judge and auditor.judge is checker.judge
        assert factchecker.decomposer is checker.decomposer
        assert auditor.decomposer is checker.decomposer
        assert resolved == {"builtin": 1} and sum(decomposers.values()) == 1
        assert state.check_slots.slots is not None  # a CPU-bound judge: slots per core
    finally:
        state.runs.close()


def test_a_model_worker_shares_one_judge_batched_for_facts(
        tmp_path: Path, kb_path: Path, fake_model: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path, kb_path, model=fake_model, decomposer="rules",
                     claims_per_call=4, factcheck={"facts_per_call": 2})
    state, resolved, decomposers = _started(config, monkeypatch)
    try:
        assert state.problems == {}
        assert resolved == {"llm": 1}
        assert decomposers == {"rules": 1}
        checker, factchecker = state.need_checker(), state.need_factchecker()
        check_judge, fact_judge = checker.judge, factchecker.judge
        assert fact_judge.model is check_judge.model  # type: ignore[attr-defined]
        assert check_judge.claims_per_call == 4  # type: ignore[attr-defined]
        assert fact_judge.claims_per_call == 2  # type: ignore[attr-defined]
        assert factchecker.decomposer is checker.decomposer
        assert state.auditor("job-1").judge is check_judge
        assert state.check_slots.slots is None  # an I/O-bound judge, no limit set
        assert resolved == {"llm": 1}
    finally:
        state.runs.close()
