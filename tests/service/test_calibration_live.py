"""The service says which confidence card is live (issue 42): GET /v1/calibration (admin) and
the medverify_calibration_info gauge, with the audit event that applied the card."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from medverify.config import Config
from medverify.evals import calibrate as flow
from medverify.judge import JudgeItem
from medverify.kb import KnowledgeBase
from medverify.prompts import load_prompt
from medverify.records import Claim, Document, Passage
from medverify.service.app import create_app
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge
from medverify.testing.known_judge import KnownQualityJudge

JUDGE_ID = "llm:fake:calibrated"


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("MEDVERIFY_HOME", str(tmp_path / "home"))
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="m", title="Metformin", text="Metformin is first-line.")])
    register_fake("calibrated", ScriptedProvider(scripted_judge(keyword_rule("first-line"))))
    with RunStore(tmp_path / "runs.db") as store:
        admin = KeyStore(store).create("admin", Role.ADMIN).secret
    yield {"tmp": tmp_path, "auth": {"Authorization": f"Bearer {admin}"}}
    unregister_fake("calibrated")


def _config(tmp: Path, calibration: str | None = None) -> Config:
    return Config(kb=tmp / "kb", store=tmp / "runs.db", cache_path=tmp / "cache.db",
                  model="fake:calibrated", decomposer="rules",
                  judge_settings={"calibration": calibration})


def _card(tmp: Path) -> str:
    """A card fitted (on a judge of known quality) for the service's judge, applied as
    "site-a" with `calibrate --apply`'s function."""
    examples = [flow.Labelled(JudgeItem(claim=Claim(id=f"c{i}", text=f"Claim {i}."), passages=[
        Passage(id=f"p{i}", doc_id="d", text=f"Passage {i}.")]), ("SUPPORTED", "CONTRADICTED",
        "NOT_ENOUGH_INFO")[i % 3], f"g{i}") for i in range(90)]
    judge = KnownQualityJudge({e.item.claim.id: e.gold for e in examples})
    verdicts = asyncio.run(flow.judge_all(judge, examples))
    card = flow.fit_card(judge, examples, verdicts, sources=["test"], by="dr-a")
    card = card.model_copy(update={"judge": JUDGE_ID, "prompt": load_prompt("judge").id})
    flow.apply_card(card, "site-a", tmp / "runs.db", by="dr-a")
    return card.card_id


def test_no_card_is_reported_as_none(setup: dict[str, Any]) -> None:
    with TestClient(create_app(_config(setup["tmp"]), run_jobs=False)) as client:
        body = client.get("/v1/calibration", headers=setup["auth"]).json()
        assert body == {"judge": JUDGE_ID, "card": None, "fits": None, "applied": None}
        assert 'medverify_calibration_info{card="none",judge="none"} 1.0' in client.get(
            "/metrics", headers=setup["auth"]).text


def test_the_live_card_and_who_applied_it(setup: dict[str, Any]) -> None:
    card_id = _card(setup["tmp"])
    with TestClient(create_app(_config(setup["tmp"], "site-a"), run_jobs=False)) as client:
        assert client.get("/v1/calibration").status_code == 401
        body = client.get("/v1/calibration", headers=setup["auth"]).json()
        assert body["card"]["card_id"] == card_id and body["fits"] is True
        assert body["card"]["created_by"] == "dr-a" and body["card"]["rows"] == 90
        assert body["applied"]["action"] == "calibration.apply"
        assert body["applied"]["target"] == card_id
        metrics = client.get("/metrics", headers=setup["auth"]).text
        assert f'medverify_calibration_info{{card="{card_id}",judge="{JUDGE_ID}"}} 1.0' in metrics
