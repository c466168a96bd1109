"""The service's pages and bodies after issue 30: /docs and /redoc load their assets from
the service (no CDN; the CDN only as a logged fallback without fastapi-offline), only UTF-8
JSON without NaN/Infinity is accepted, ``status=all`` lists the whole review queue (API and
UI), and a run's HTML report carries a strict Content-Security-Policy."""

from __future__ import annotations

import base64
import hashlib
import logging
import re
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
from medverify.service import docs_pages
from medverify.service.app import create_app
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge

ANSWER = {"question": "What about metformin?",
          "text": "Metformin is a first-line medicine. Metformin is taken with meals."}


@contextmanager
def _setup(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="d1", text="Metformin is a first-line medicine.")])
    register_fake("pages", ScriptedProvider(scripted_judge(keyword_rule())))
    with RunStore(tmp_path / "runs.db") as store:
        keys = KeyStore(store)
        secrets = {r: keys.create(f"{r.value} key", r).secret for r in Role}
    config = Config(kb=tmp_path / "kb", store=tmp_path / "runs.db",
                    cache_path=tmp_path / "cache.db", model="fake:pages", decomposer="rules",
                    arbitration={"coverage_gap": "ESCALATE", "escalation_budget": 1.0},
                    service={"job_poll_s": 0.02})
    yield {"tmp": tmp_path, "secrets": secrets, "config": config}
    unregister_fake("pages")


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with _setup(tmp_path) as made:
        yield made


@pytest.fixture
def client(setup: dict[str, Any]) -> Iterator[TestClient]:
    with TestClient(create_app(setup["config"], run_jobs=False)) as c:
        yield c


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One app (``client``) and its setup for the tests that only read or are refused (each
    checks that nothing was written), built once for the module instead of once per test."""
    tmp = tmp_path_factory.mktemp("pages")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEDVERIFY_HOME", str(tmp / "mv-home"))
        with _setup(tmp) as made, TestClient(create_app(made["config"], run_jobs=False)) as c:
            yield {**made, "client": c}


def _auth(setup: dict[str, Any], role: Role = Role.CLIENT) -> dict[str, str]:
    return {"Authorization": f"Bearer {setup['secrets'][role]}"}


def _urls(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="([^"]*)"', html)


# -- /docs and /redoc ----------------------------------------------------------------------


def test_docs_pages_load_only_local_assets_and_need_no_key(shared: dict[str, Any]) -> None:
    client = shared["client"]
    assert docs_pages.asset_dir() is not None, "fastapi-offline is in the dev extra"
    for page, wanted in (("/docs", {"swagger-ui-bundle.js", "swagger-ui.css", "favicon.png"}),
                         ("/redoc", {"redoc.standalone.js", "favicon.png"})):
        response = client.get(page)  # no Authorization header, as before
        assert response.status_code == 200 and "text/html" in response.headers["content-type"]
        urls = _urls(response.text)
        assert {u.rsplit("/", 1)[-1] for u in urls} == wanted, urls
        assert all(u.startswith(docs_pages.STATIC_PREFIX + "/") for u in urls), urls
        assert "cdn." not in response.text and "fonts.googleapis" not in response.text
        assert "'/openapi.json'" in response.text or '"/openapi.json"' in response.text
        for url in urls:
            asset = client.get(url)
            name = url.rsplit("/", 1)[-1]
            assert asset.status_code == 200, url
            assert asset.headers["content-type"] == docs_pages.ASSETS[name]
            assert asset.headers["x-content-type-options"] == "nosniff"
            assert len(asset.content) > 1000
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/docs/oauth2-redirect").status_code == 200


def test_only_the_listed_assets_are_served_and_none_is_in_the_schema(
        shared: dict[str, Any]) -> None:
    client = shared["client"]
    for name in ("core.py", "..%2F__init__.py", "%2e%2e%2fcore.py", "LICENSE"):
        response = client.get(f"{docs_pages.STATIC_PREFIX}/{name}")
        assert response.status_code == 404, (name, response.text)
    paths = client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p.startswith(("/docs", "/redoc", "/static"))]
    assert "/v1/check" in paths


def test_without_fastapi_offline_the_pages_fall_back_to_the_cdn_and_say_so(
        setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(docs_pages, "PACKAGE", "fastapi_offline_is_not_installed")
    with caplog.at_level(logging.WARNING, logger=docs_pages.__name__):
        app = create_app(setup["config"], run_jobs=False)
    assert "/docs and /redoc load Swagger UI and ReDoc from a CDN" in caplog.text
    with TestClient(app) as client:
        docs = client.get("/docs")
        assert docs.status_code == 200 and "cdn.jsdelivr.net" in docs.text
        assert "cdn.jsdelivr.net" in client.get("/redoc").text
        assert client.get(f"{docs_pages.STATIC_PREFIX}/swagger-ui.css").status_code == 404


# -- bodies: only UTF-8 JSON, no NaN/Infinity -----------------------------------------------


@pytest.mark.parametrize(("body", "says"), [
    ('{"text": "Metformin is a first-line medicine."}'.encode("utf-16"), "not UTF-8"),
    ('{"text": "Metformin is a first-line medicine."}'.encode("utf-16-le"), "not valid JSON"),
    ('{"text": "Metformin is a first-line medicine."}'.encode("utf-32"), "not UTF-8"),
    (b'{"text": "Metformin is a first-line medicine.", "meta": {"score": NaN}}', "NaN"),
    (b'{"text": "Metformin is a first-line medicine.", "meta": {"x": [-Infinity]}}',
     "-Infinity"),
    (b'{"text": "Metformin is a first-line medicine.", "meta": {"x": Infinity}}',
     "Infinity is not a JSON number"),
])
def test_bodies_that_are_not_utf8_json_are_refused_and_nothing_is_written(
        shared: dict[str, Any], body: bytes, says: str) -> None:
    client, setup = shared["client"], shared
    response = client.post("/v1/check", content=body, headers={
        "Content-Type": "application/json", **_auth(setup)})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_json" and says in error["message"], error
    with RunStore(setup["tmp"] / "runs.db") as store:
        assert store.list_runs() == []


def test_utf8_json_with_a_bom_or_finite_numbers_is_still_accepted(
        client: TestClient, setup: dict[str, Any]) -> None:
    text = '{"text": "Metformin is a first-line medicine.", "meta": {"score": 1e308, "n": "NaN"}}'
    for body in (text.encode(), b"\xef\xbb\xbf" + text.encode()):
        response = client.post("/v1/check", content=body, headers={
            "Content-Type": "application/json", **_auth(setup)})
        assert response.status_code == 200, response.text


# -- status=all ------------------------------------------------------------------------------


def _queue(client: TestClient, setup: dict[str, Any], status: str | None) -> Any:
    params = {} if status is None else {"status": status}
    return client.get("/v1/review/items", params=params, headers=_auth(setup, Role.REVIEWER))


def test_status_all_lists_every_item_in_the_api_and_the_ui(
        client: TestClient, setup: dict[str, Any]) -> None:
    assert client.post("/v1/check", json=ANSWER, headers=_auth(setup)).status_code == 200
    first, second = _queue(client, setup, None).json()
    labelled = client.post(f"/v1/review/items/{first['id']}/labels", json={"label": "FACT"},
                           headers=_auth(setup, Role.REVIEWER))
    assert labelled.status_code == 200 and labelled.json()["status"] == "closed"
    every = {first["id"], second["id"]}
    assert {i["id"] for i in _queue(client, setup, "all").json()} == every
    assert {i["id"] for i in _queue(client, setup, None).json()} == every
    assert [i["id"] for i in _queue(client, setup, "open").json()] == [second["id"]]
    assert [i["id"] for i in _queue(client, setup, "closed").json()] == [first["id"]]
    assert _queue(client, setup, "everything").status_code == 422
    login = client.get("/review/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', login.text)
    assert csrf is not None
    client.post("/review/login", data={"csrf": csrf.group(1),
                                       "key": setup["secrets"][Role.REVIEWER]})
    page = client.get("/review?status=all")
    assert page.status_code == 200 and '<option value="all" selected>' in page.text
    assert set(re.findall(r'class="item" data-id="([^"]+)"', page.text)) == every
    assert re.findall(r'class="item" data-id="([^"]+)"',
                      client.get("/review").text) == [second["id"]]


# -- the HTML report's headers ---------------------------------------------------------------


def _csp(header: str) -> dict[str, str]:
    parts = (p.strip().split(" ", 1) for p in header.split(";") if p.strip())
    return {p[0]: p[1] if len(p) > 1 else "" for p in parts}


def test_a_run_report_carries_a_strict_csp_that_allows_only_its_own_script(
        client: TestClient, setup: dict[str, Any]) -> None:
    evil = {"text": "Metformin <script>alert(1)</script> is first-line. "
                    '<img src="https://tracker.example/x.png"> Take it with meals.'}
    run_id = client.post("/v1/check", json=evil, headers=_auth(setup)).json()["run_id"]
    response = client.get(f"/v1/runs/{run_id}/report", headers=_auth(setup))
    assert response.status_code == 200, response.text
    assert response.headers["x-content-type-options"] == "nosniff"
    csp = _csp(response.headers["content-security-policy"])
    assert csp["default-src"] == "'none'" and csp["img-src"] == "data:"
    assert csp["style-src"] == "'unsafe-inline'" and csp["frame-ancestors"] == "'none'"
    scripts = re.findall(r"<script>(.*?)</script>", response.text, re.S)
    assert len(scripts) == 1, "the report's one inline script (the claim popovers)"
    digests = {"'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()
               + "'" for s in scripts}
    assert set(csp["script-src"].split()) == digests
    assert "<script>alert(1)</script>" not in response.text
    assert not re.search(r'<(?:script|link|img|iframe)[^>]+(?:src|href)="https?:',
                         response.text)
