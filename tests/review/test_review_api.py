"""The review queue over HTTP (FastAPI's test client, as in test_service.py): roles, the
error codes, and the whole loop: a check escalates a claim, a reviewer labels it FACT with
a source, the knowledge base learns it and a re-check of the same answer finds it; an admin
reverts it and the claim is back where it was."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.service.app import create_app
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import Decision, scripted_judge

DOCS = [Document(doc_id="metformin", title="Metformin",
                 text="Metformin is a first-line medicine for type 2 diabetes. The usual "
                 "starting dose is 500 mg once or twice daily with meals.")]
CLAIM = "Metformin can cause lactic acidosis."
ANSWER = {"question": "What should I know about metformin?",
          "text": f"Metformin is a first-line medicine for type 2 diabetes. {CLAIM}"}
SOURCE = "https://example.org/metformin-safety"


def in_passages(claim: str, passages: dict[str, str]) -> Decision:
    """Supported when a passage holds the claim word for word: the lactic acidosis claim is
    a COVERAGE_GAP until the KB learns it."""
    text = " ".join(" ".join(passages.values()).split()).casefold()
    return claim.strip().rstrip(".").casefold() in text, False


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest(DOCS)
    register_fake("review", ScriptedProvider(scripted_judge(in_passages)))
    with RunStore(tmp_path / "runs.db") as store:
        keys = KeyStore(store)
        secrets = {r.value: keys.create(f"{r.value} key", r).secret for r in Role}
        secrets["reviewer2"] = keys.create("second reviewer", Role.REVIEWER).secret
        secrets["reviewer3"] = keys.create("third reviewer", Role.REVIEWER).secret
    yield {"tmp": tmp_path, "secrets": secrets}
    unregister_fake("review")


def _client(setup: dict[str, Any], **review: Any) -> TestClient:
    tmp = setup["tmp"]
    config = Config(kb=tmp / "kb", store=tmp / "runs.db", cache_path=tmp / "cache.db",
                    model="fake:review", decomposer="rules",
                    arbitration={"coverage_gap": "ESCALATE"}, review=review,
                    service={"job_poll_s": 0.02, "heartbeat_s": 0.05})
    return TestClient(create_app(config))


def _auth(setup: dict[str, Any], who: str = "reviewer") -> dict[str, str]:
    return {"Authorization": f"Bearer {setup['secrets'][who]}"}


def _error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    return body["error"]  # type: ignore[no-any-return]


def _categories(client: TestClient, setup: dict[str, Any]) -> dict[str, str]:
    response = client.post("/v1/check", json=ANSWER, headers=_auth(setup, "client"))
    assert response.status_code == 200, response.text
    return {r["claim"]["text"]: r["category"] for r in response.json()["results"]}


def _queued(client: TestClient, setup: dict[str, Any]) -> dict[str, Any]:
    assert _categories(client, setup)[CLAIM] == "COVERAGE_GAP"
    [item] = client.get("/v1/review/items", headers=_auth(setup)).json()
    return item  # type: ignore[no-any-return]


def test_a_client_key_cannot_use_the_review_endpoints(setup: dict[str, Any]) -> None:
    with _client(setup) as client:
        client_key = _auth(setup, "client")
        for path in ("/v1/review/items", "/v1/review/items/rv-x", "/v1/review/agreement",
                     "/v1/review/progress", "/v1/review/kb-changes"):
            _error(client.get(path, headers=client_key), 403, "forbidden")
        _error(client.post("/v1/review/items/rv-x/labels", json={"label": "FACT"},
                           headers=client_key), 403, "forbidden")
        _error(client.post("/v1/review/kb-changes/1/revert", headers=_auth(setup)), 403,
               "forbidden")  # reverting is an admin's
        _error(client.get("/v1/review/items"), 401, "unauthorized")


def test_unknown_items_and_changes_are_404(setup: dict[str, Any]) -> None:
    with _client(setup) as client:
        _error(client.get("/v1/review/items/rv-nope", headers=_auth(setup)), 404, "not_found")
        _error(client.post("/v1/review/items/rv-nope/labels", json={"label": "FACT"},
                           headers=_auth(setup)), 404, "not_found")
        _error(client.post("/v1/review/kb-changes/42/revert", headers=_auth(setup, "admin")),
               404, "not_found")
        _error(client.post("/v1/review/items/rv-x/labels", json={"label": "PERHAPS"},
                           headers=_auth(setup)), 422, "invalid_request")


def test_escalate_label_teach_recheck_and_revert(setup: dict[str, Any]) -> None:
    with _client(setup) as client:
        item = _queued(client, setup)
        assert item["claim"]["text"] == CLAIM and item["status"] == "open"
        assert item["category"] == "COVERAGE_GAP" and item["arbitration"]["decision"] == \
            "ESCALATE"
        assert item["answer_text"] == ANSWER["text"] and item["passages"]
        assert client.get(f"/v1/review/items/{item['id']}", headers=_auth(setup)).json() == item

        labelled = client.post(f"/v1/review/items/{item['id']}/labels", headers=_auth(setup),
                               json={"label": "FACT", "source_url": SOURCE,
                                     "note": "in the product information"})
        assert labelled.status_code == 200, labelled.text
        body = labelled.json()
        assert body["status"] == "closed" and body["final_label"] == "FACT"
        assert [x["reviewer"] for x in body["labels"]] == [
            client.get("/v1/review/kb-changes", headers=_auth(setup)).json()[0]["reviewer"]]
        _error(client.post(f"/v1/review/items/{item['id']}/labels", json={"label": "FACT"},
                           headers=_auth(setup, "reviewer2")), 409, "item_closed")

        [change] = client.get("/v1/review/kb-changes", headers=_auth(setup)).json()
        assert change["doc_id"] == f"review-{item['id']}" and change["source_url"] == SOURCE
        assert _categories(client, setup)[CLAIM] == "FACT"  # the KB learned it
        assert len(client.get("/v1/review/items", headers=_auth(setup)).json()) == 1

        progress = client.get("/v1/review/progress", headers=_auth(setup)).json()
        assert progress["total"]["kb_added"] == 1 and progress["total"]["labels"] == 1
        assert progress["total"]["claims_checked"] == 4
        assert progress["total"]["judge_agreement"] == 0.0  # FACT, the judge said a gap

        reverted = client.post(f"/v1/review/kb-changes/{change['id']}/revert",
                               headers=_auth(setup, "admin"))
        assert reverted.status_code == 200 and reverted.json()["reverted_at"]
        assert client.get("/v1/review/kb-changes", headers=_auth(setup)).json() == []
        assert _categories(client, setup)[CLAIM] == "COVERAGE_GAP"  # as before
        log = client.get("/v1/audit-log", headers=_auth(setup, "admin")).json()
        actions = {(e["action"], e["target"], e["status"]) for e in log}
        assert ("POST /v1/review/items/{item_id}/labels", item["id"], 200) in actions
        assert ("POST /v1/review/kb-changes/{change_id}/revert", str(change["id"]),
                200) in actions


def test_a_private_source_url_is_422_and_writes_nothing(setup: dict[str, Any]) -> None:
    with _client(setup) as client:
        item = _queued(client, setup)
        refused = client.post(f"/v1/review/items/{item['id']}/labels", headers=_auth(setup),
                              json={"label": "FACT", "source_url": "http://169.254.169.254/"})
        assert "source_url" in _error(refused, 422, "invalid_input")["message"]
        again = client.get(f"/v1/review/items/{item['id']}", headers=_auth(setup)).json()
        assert again["status"] == "open" and again["labels"] == []
        assert client.get("/v1/review/kb-changes", headers=_auth(setup)).json() == []


def test_two_reviewers_blind_then_adjudication(setup: dict[str, Any]) -> None:
    with _client(setup, labels_needed=2) as client:
        item = _queued(client, setup)
        url = f"/v1/review/items/{item['id']}/labels"
        first = client.post(url, json={"label": "FACT"}, headers=_auth(setup)).json()
        assert first["status"] == "needs_second" and len(first["labels"]) == 1
        _error(client.post(url, json={"label": "FACT"}, headers=_auth(setup)), 409,
               "already_labelled")
        blind = client.get(f"/v1/review/items/{item['id']}", headers=_auth(setup, "reviewer2"))
        assert blind.json()["labels"] == []  # the second reviewer does not see the first
        admin = client.get(f"/v1/review/items/{item['id']}", headers=_auth(setup, "admin"))
        assert len(admin.json()["labels"]) == 1
        split = client.post(url, json={"label": "HALLUCINATION", "correction": "No."},
                            headers=_auth(setup, "reviewer2")).json()
        assert split["status"] == "adjudication" and len(split["labels"]) == 2
        queue = client.get("/v1/review/items?status=adjudication", headers=_auth(setup))
        assert [i["id"] for i in queue.json()] == [item["id"]]
        done = client.post(url, json={"label": "FACT", "source_url": SOURCE},
                           headers=_auth(setup, "reviewer3")).json()
        assert done["status"] == "closed" and done["final_label"] == "FACT"
        assert [x["role"] for x in done["labels"]] == ["first", "second", "adjudication"]
        assert _categories(client, setup)[CLAIM] == "FACT"
        pairs = client.get("/v1/review/agreement", headers=_auth(setup)).json()
        assert len(pairs) == 3 and all(p["n"] == 1 for p in pairs)


def test_assign_and_filters(setup: dict[str, Any]) -> None:
    with _client(setup) as client:
        item = _queued(client, setup)
        taken = client.post(f"/v1/review/items/{item['id']}/assign", headers=_auth(setup))
        assert taken.status_code == 200 and taken.json()["assignee"]
        mine = client.get(f"/v1/review/items?assignee={taken.json()['assignee']}",
                          headers=_auth(setup)).json()
        assert [i["id"] for i in mine] == [item["id"]]
        assert client.get("/v1/review/items?status=closed", headers=_auth(setup)).json() == []
        assert client.get("/v1/review/items?min_priority=1.5",  # above any urgency
                          headers=_auth(setup)).json() == []
        _error(client.get("/v1/review/items?status=maybe", headers=_auth(setup)), 422,
               "invalid_request")


def test_a_check_job_queues_its_escalations(setup: dict[str, Any]) -> None:
    with _client(setup) as client:
        other = {**ANSWER, "text": "Metformin can cause vitamin B12 deficiency."}
        job = client.post("/v1/jobs/check", json={"answers": [ANSWER, other]},
                          headers=_auth(setup, "client")).json()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            state = client.get(f"/v1/jobs/{job['id']}", headers=_auth(setup, "client")).json()
            if state["status"] in ("done", "failed", "cancelled"):
                break
            time.sleep(0.05)
        assert state["status"] == "done", state
        items = client.get("/v1/review/items", headers=_auth(setup)).json()
        assert len(items) == 2 and {i["answer_text"] for i in items} == {ANSWER["text"],
                                                                        other["text"]}
        # the same claim again, in another answer, while it waits: not queued twice
        again = {**ANSWER, "text": CLAIM}
        assert client.post("/v1/check", json=again, headers=_auth(setup, "client")).is_success
        assert len(client.get("/v1/review/items", headers=_auth(setup)).json()) == 2


def test_review_can_be_turned_off(setup: dict[str, Any]) -> None:
    with _client(setup, enabled=False) as client:
        assert _categories(client, setup)[CLAIM] == "COVERAGE_GAP"
        assert client.get("/v1/review/items", headers=_auth(setup)).json() == []
