"""The HTTP findings of a schemathesis probe (issue 43, item 1), each pinned by a test that
failed before its fix: bounded offsets, job answers validated as ``POST /v1/check``'s, a
label's ``source_url`` pattern in the schema, JSON errors documented as JSON, a 405 that
names every method, no self-revoke and no revoking the last admin key, a private run store,
headers on the documentation pages, one API version."""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.service.app import API_VERSION, create_app
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge

ROOT = Path(__file__).resolve().parents[2]
DOCS = [Document(doc_id="metformin", title="Metformin",
                 text="Metformin is a first-line medicine for type 2 diabetes.")]


@contextmanager
def _service(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A service over a tiny KB, with one key per role (``secrets``) and their ids."""
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest(DOCS)
    register_fake("findings", ScriptedProvider(scripted_judge(keyword_rule(
        supported="first-line", contradicted="5000 mg"))))
    store = tmp_path / "private" / "store" / "runs.db"
    with RunStore(store) as runs:
        keys = KeyStore(runs)
        made = {r: keys.create(f"{r.value} key", r) for r in Role}
    config = Config(kb=tmp_path / "kb", store=store, cache_path=tmp_path / "cache.db",
                    model="fake:findings", decomposer="rules", service={"job_poll_s": 0.02})
    with TestClient(create_app(config, run_jobs=False)) as client:
        yield {"client": client, "store": store, "config": config,
               "auth": {r: {"Authorization": f"Bearer {m.secret}"} for r, m in made.items()},
               "ids": {r: m.key.id for r, m in made.items()}}
    unregister_fake("findings")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A service of its own, for the tests that change keys or write to the store."""
    with _service(tmp_path) as up:
        yield up


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One service for the module's tests that only read or are refused (nothing they send
    is kept: each checks that), built once instead of once per test."""
    tmp = tmp_path_factory.mktemp("findings")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEDVERIFY_HOME", str(tmp / "mv-home"))
        with _service(tmp) as up:
            yield up


def _code(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["error"]["code"] == code, response.text
    return str(response.json()["error"]["message"])


def test_a_huge_offset_is_refused_by_the_schema_not_a_500(served: dict[str, Any]) -> None:
    client, auth = served["client"], served["auth"][Role.REVIEWER]
    huge = client.get("/v1/review/items", params={"offset": 2**63}, headers=auth)
    _code(huge, 422, "invalid_request")
    assert client.get("/v1/review/items", params={"offset": 2**31 - 1},
                      headers=auth).json() == []
    schema = client.get("/openapi.json").json()
    [offset] = [p for p in schema["paths"]["/v1/review/items"]["get"]["parameters"]
                if p["name"] == "offset"]
    assert offset["schema"]["maximum"] == 2**31 - 1


def test_a_huge_kb_change_id_is_refused_not_a_500(served: dict[str, Any]) -> None:
    """schemathesis in CI: POST /v1/review/kb-changes/2**63/revert was a 500 (OverflowError
    in SQLite)."""
    from medverify.review.records import KBChangeNotFound
    from medverify.store.review import ReviewStore

    client, auth = served["client"], served["auth"][Role.ADMIN]
    huge = client.post(f"/v1/review/kb-changes/{2**63}/revert", headers=auth)
    _code(huge, 422, "invalid_request")
    _code(client.post("/v1/review/kb-changes/7/revert", headers=auth), 404, "not_found")
    with RunStore(served["store"]) as runs, pytest.raises(KBChangeNotFound):
        ReviewStore(runs).mark_reverted(2**70)


def test_an_empty_answer_in_a_job_is_refused_as_on_check(served: dict[str, Any]) -> None:
    client, auth = served["client"], served["auth"][Role.CLIENT]
    for path in ("/v1/jobs/check", "/v1/factcheck"):
        for text in ("", "   \n", "\x1c", "a\x00b"):
            refused = client.post(path, json={"answers": [{"text": "fine"}, {"text": text}]},
                                  headers=auth)
            _code(refused, 422, "invalid_request")
    long = served["config"].max_answer_chars + 1
    over = client.post("/v1/jobs/check", json={"answers": [{"text": "ok"}, {"text": "a" * long}]},
                       headers=auth)
    assert "answers[1]" in _code(over, 422, "invalid_input")
    assert client.get("/v1/jobs", headers=auth).json() == []  # nothing was queued
    answer = client.get("/openapi.json").json()["components"]["schemas"]["BatchAnswer"]
    assert answer["properties"]["text"]["minLength"] == 1


def test_a_source_url_that_is_not_http_is_refused_by_the_schema(
        served: dict[str, Any]) -> None:
    schema = served["client"].get("/openapi.json").json()["components"]["schemas"]
    pattern = schema["LabelRequest"]["properties"]["source_url"]["anyOf"][0]["pattern"]
    for url, fits in (("https://www.nih.gov/a?b=1", True), ("HTTP://example.org", True),
                      ("", True), ("ftp://example.org/x", False), ("nih.gov", False),
                      ("https://", False), ("http:// spaced.org", False)):
        assert bool(re.search(pattern, url)) is fits, url
    refused = served["client"].post("/v1/review/items/nope/labels", json={
        "label": "FACT", "source_url": "ftp://example.org/x"},
        headers=served["auth"][Role.REVIEWER])
    _code(refused, 422, "invalid_request")


def test_errors_of_the_html_report_are_json_and_documented_so(
        served: dict[str, Any]) -> None:
    client = served["client"]
    _code(client.get("/v1/runs/x/report", params={"answer": -1},
                     headers=served["auth"][Role.CLIENT]), 422, "invalid_request")
    paths = client.get("/openapi.json").json()["paths"]
    for path, method in (("/v1/runs/{run_id}/report", "get"), ("/metrics", "get")):
        responses = paths[path][method]["responses"]
        errors = {s: r for s, r in responses.items() if s[0] in "45"}
        assert errors and all(list(r["content"]) == ["application/json"]
                              for r in errors.values()), (path, errors)
    assert list(paths["/v1/runs/{run_id}/report"]["get"]["responses"]["200"]["content"]) == [
        "text/html"]


def test_a_405_names_every_method_of_the_path(served: dict[str, Any]) -> None:
    for method in ("DELETE", "OPTIONS", "PUT"):
        refused = served["client"].request(method, "/v1/keys",
                                            headers=served["auth"][Role.ADMIN])
        assert refused.status_code == 405
        assert refused.headers["allow"] == "GET, POST"


def test_an_admin_key_cannot_revoke_itself_or_the_last_admin(service: dict[str, Any]) -> None:
    client, admin, ids = service["client"], service["auth"][Role.ADMIN], service["ids"]
    own = client.post(f"/v1/keys/{ids[Role.ADMIN]}/revoke", headers=admin)
    assert "cannot revoke itself" in _code(own, 409, "own_key")
    second = client.post("/v1/keys", json={"name": "second admin", "role": "admin"},
                         headers=admin).json()
    other = {"Authorization": f"Bearer {second['secret']}"}
    assert client.post(f"/v1/keys/{ids[Role.ADMIN]}/revoke", headers=other).status_code == 200
    with RunStore(service["store"]) as runs:  # the operator's own key, from another admin's
        last = KeyStore(runs).create("third admin", Role.ADMIN)  # revoked on the server
        KeyStore(runs).revoke(last.key.id)
    third = client.post(f"/v1/keys/{second['key']['id']}/revoke", headers=other)
    _code(third, 409, "own_key")
    assert client.get("/v1/keys", headers=other).status_code == 200  # still an admin
    client_key = client.post(f"/v1/keys/{ids[Role.CLIENT]}/revoke", headers=other)
    assert client_key.status_code == 200 and client_key.json()["revoked_at"]


def test_the_run_store_and_job_folder_are_private(service: dict[str, Any]) -> None:
    store: Path = service["store"]
    service["client"].post("/v1/keys", json={"name": "write"},
                           headers=service["auth"][Role.ADMIN])  # a write: WAL in use
    files = [store] + [Path(f"{store}{x}") for x in ("-wal", "-shm") if Path(f"{store}{x}")
                       .exists()]
    assert len(files) == 3
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for folder in (store.parent, store.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    jobs = service["config"].local_dir / "service-jobs"
    assert stat.S_IMODE(jobs.stat().st_mode) == 0o700


def test_the_documentation_pages_carry_the_page_headers(served: dict[str, Any]) -> None:
    client = served["client"]
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        page = client.get(path)
        assert page.status_code == 200
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
        assert "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["x-content-type-options"] == "nosniff"


def test_the_service_and_the_pinned_schema_say_one_version(served: dict[str, Any]) -> None:
    live = served["client"].get("/openapi.json").json()["info"]["version"]
    pinned = json.loads((ROOT / "docs" / "openapi.json").read_text())["info"]["version"]
    assert live == pinned == API_VERSION


def test_booleans_and_integers_are_strict_in_the_api_records() -> None:
    """schemathesis (every check): `"from_cache": 0` and `"line": false` were accepted."""
    from pydantic import ValidationError

    from medverify.audit.records import AuditInput
    from medverify.records import Source

    with pytest.raises(ValidationError):
        Source.model_validate({"from_cache": 0})
    with pytest.raises(ValidationError):
        AuditInput.model_validate({"answer": {"text": "x"}, "line": False})
    assert Source.model_validate_json('{"from_cache": true}').from_cache is True
    assert AuditInput.model_validate_json('{"answer": {"text": "x"}, "line": 3}').line == 3
