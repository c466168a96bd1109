"""The size and content of ``POST /v1/check``'s answer with the built-in judge over real
MedQuAD passages (docs from the shipped sample): compact by default, within its budget
and still holding what a client acts on; ``?detail=full`` and the run store keep the whole
report; the Python client parses both."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from medverify.client import Client
from medverify.config import Config
from medverify.kb import KnowledgeBase, sample_kb_path
from medverify.records import Document, Report
from medverify.service.app import create_app
from medverify.service.compact import RESPONSE_NOTE
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore

COMPACT_BUDGET = 10 * 1024
"""The documented budget (docs/service.md) of a 2-claim compact answer, in bytes (8 KB
until issue 41 added the exact-check findings of passages on the claim's point, the
coverage doubts and the clinical kinds: 6,324 -> 8,266 bytes on this answer)."""

DOCS = ("medquad:NIDDK:0000070", "medquad:NIHSeniorHealth:0000035", "medquad:NHLBI:0000052")
ANSWER = {"question": "How is type 2 diabetes treated?",
          "text": "Metformin is a first-line medicine for type 2 diabetes. "
                  "Statins lower LDL cholesterol."}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("check-response")
    docs = [Document.model_validate(json.loads(line))
            for line in sample_kb_path().read_text("utf-8").splitlines() if line.strip()]
    with KnowledgeBase.create(tmp / "kb", embedder="hash") as kb:
        kb.ingest([d for d in docs if d.doc_id in DOCS])
    with RunStore(tmp / "runs.db") as store:
        secret = KeyStore(store).create("client", Role.CLIENT).secret
    config = Config(kb=tmp / "kb", store=tmp / "runs.db", cache_path=tmp / "cache.db",
                    decomposer="rules")
    assert config.judge_name == "builtin"
    with TestClient(create_app(config)) as client:
        served: dict[str, Any] = {"client": client, "secret": secret,
                                  "auth": {"Authorization": f"Bearer {secret}"}}
        answers: list[httpx.Response] = []  # as the server sent them

        def relay(request: httpx.Request) -> httpx.Response:  # the Python client, in process
            got = client.request(request.method, request.url.path,
                                 params=dict(request.url.params), content=request.content,
                                 headers=dict(request.headers))
            answers.append(httpx.Response(got.status_code, headers=dict(got.headers),
                                          content=got.content))
            return answers[-1]

        with Client("http://testserver", secret,
                    transport=httpx.MockTransport(relay)) as api:
            served["parsed"] = {detail: api.check(ANSWER["text"], question=ANSWER["question"],
                                                  detail=detail)
                                for detail in ("full", "compact")}
        served["full"], served["compact"] = answers
        yield served


def test_the_compact_answer_is_within_budget_and_keeps_what_a_client_acts_on(
        served: dict[str, Any]) -> None:
    full, compact = served["full"], served["compact"]
    assert full.status_code == compact.status_code == 200, compact.text
    assert len(compact.content) <= COMPACT_BUDGET, len(compact.content)
    assert len(full.content) > 5 * len(compact.content), (len(full.content),
                                                           len(compact.content))
    report, whole = Report.model_validate_json(compact.content), Report.model_validate_json(
        full.content)
    assert len(report.results) == len(whole.results) == 2
    assert report.notes[RESPONSE_NOTE]["detail"] == "compact"
    assert report.notes[RESPONSE_NOTE]["full_report"].startswith(f"GET /v1/runs/{report.run_id}")
    assert report.run_id and report.kb_snapshot and report.models and report.config == {}
    for mine, theirs in zip(report.results, whole.results, strict=True):
        assert mine.claim == theirs.claim and mine.category == theirs.category
        assert mine.arbitration == theirs.arbitration and mine.arbitration is not None
        assert (mine.confidence, mine.confident, mine.not_sure) == (
            theirs.confidence, theirs.confident, theirs.not_sure)
        assert (mine.evidence_passage_id, mine.evidence_quote) == (
            theirs.evidence_passage_id, theirs.evidence_quote)
        assert mine.verdict is not None and theirs.verdict is not None
        assert mine.verdict.raw_output is None and theirs.verdict.raw_output
        assert mine.verdict.findings == theirs.verdict.findings
        kept = {p.id: p for p in mine.passages}
        named = {mine.evidence_passage_id, *(f.passage_id for f in mine.verdict.findings)}
        assert named - {None} <= set(kept)
        for passage in theirs.passages:
            if passage.id in kept:
                assert (kept[passage.id].title, kept[passage.id].url) == (passage.title,
                                                                          passage.url)
                assert kept[passage.id].text == "" and passage.text
    assert any(r.evidence_quote for r in report.results)  # the answer has a deciding quote


def test_the_run_store_keeps_the_whole_report(served: dict[str, Any]) -> None:
    report = Report.model_validate_json(served["compact"].content)
    stored = served["client"].get(f"/v1/runs/{report.run_id}", headers=served["auth"])
    assert stored.status_code == 200, stored.text
    [whole] = stored.json()["reports"]
    assert all(len(r["passages"]) > 1 and all(p["text"] for p in r["passages"])
               for r in whole["results"])
    assert all(r["verdict"]["raw_output"] for r in whole["results"]) and whole["config"]


def test_an_unknown_detail_is_refused(served: dict[str, Any]) -> None:
    response = served["client"].post("/v1/check?detail=everything", json=ANSWER,
                                     headers=served["auth"])
    assert response.status_code == 422 and response.json()["error"]["code"] == (
        "invalid_request")


def test_the_python_client_reads_both_forms(served: dict[str, Any]) -> None:
    compact, full = served["parsed"]["compact"], served["parsed"]["full"]
    assert isinstance(compact, Report) and isinstance(full, Report)
    assert RESPONSE_NOTE in compact.notes and RESPONSE_NOTE not in full.notes
    assert all(p.text == "" for r in compact.results for p in r.passages)
    assert all(len(r.passages) > 1 and r.verdict and r.verdict.raw_output
               for r in full.results)
