"""The API's documentation pages and a run's HTML report in a real browser (Playwright
driving Debian's Chromium against uvicorn on a loopback port), with every request to
another host blocked: /docs and /redoc must render from the service's own assets, and the
report must work under its Content-Security-Policy. Marked ``browser``: run with
``pytest -m browser``; skipped without Playwright or Chromium (``apt-get install
chromium``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.store.access import KeyStore, Role
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge
from medverify.testing.service import ServiceThread

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("playwright.sync_api",
                    reason="Playwright is not installed (pip install playwright: the dev extra)")

pytestmark = pytest.mark.browser

REDOCLY_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"

@pytest.fixture
def server(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="d1", text="Metformin is a first-line medicine.")])
    register_fake("docs-browser", ScriptedProvider(scripted_judge(
        keyword_rule(supported="first-line", contradicted="5000 mg"))))
    with RunStore(tmp_path / "runs.db") as store:
        secret = KeyStore(store).create("client key", Role.CLIENT).secret
    config = Config(kb=tmp_path / "kb", store=tmp_path / "runs.db",
                    cache_path=tmp_path / "cache.db", model="fake:docs-browser",
                    decomposer="rules")
    try:
        with ServiceThread(config) as service:
            yield {"url": service.url, "secret": secret}
    finally:
        unregister_fake("docs-browser")


def _offline_page(browser: Any, server: dict[str, Any], **context: Any) -> Any:
    """A page whose requests to any host but the service's are aborted (and recorded in
    ``page.blocked``); console errors and page errors in ``page.problems``."""
    own = urlsplit(server["url"]).netloc
    opened = browser.new_context(**context).new_page()
    opened.set_default_timeout(20_000)
    opened.blocked, opened.problems = [], []

    def route(request_route: Any) -> None:
        url = request_route.request.url
        if urlsplit(url).netloc == own or url.startswith(("data:", "blob:")):
            request_route.continue_()
        else:
            opened.blocked.append(url)
            request_route.abort()

    opened.route("**/*", route)
    opened.on("console", lambda m: m.type == "error" and opened.problems.append(m.text))
    opened.on("pageerror", lambda e: opened.problems.append(str(e)))
    return opened


def test_docs_render_the_endpoints_with_other_hosts_blocked(browser: Any,
                                                            server: dict[str, Any]) -> None:
    page = _offline_page(browser, server)
    page.goto(server["url"] + "/docs")
    page.get_by_text("/v1/check", exact=True).first.wait_for(state="visible")
    assert page.locator(".opblock").count() >= 10  # every endpoint is listed
    assert page.locator(".opblock-tag").filter(has_text="review").count() == 1
    redoc = _offline_page(browser, server)
    redoc.goto(server["url"] + "/redoc")
    redoc.get_by_text("/v1/check").first.wait_for(state="attached")
    assert page.blocked == [], page.blocked
    # ReDoc's sidebar credit always asks for Redocly's logo (an <img> it hides when the
    # image fails): the one outside request, decorative; the page renders without it
    assert set(redoc.blocked) <= {REDOCLY_LOGO}, redoc.blocked
    assert page.problems == [], page.problems


def test_a_run_report_works_under_its_content_security_policy(browser: Any,
                                                               server: dict[str, Any]) -> None:
    auth = {"Authorization": f"Bearer {server['secret']}"}
    answer = {"text": "Metformin is a first-line medicine. Take 5000 mg daily."}
    report = httpx.post(server["url"] + "/v1/check", json=answer, headers=auth, timeout=30.0)
    assert report.status_code == 200, report.text
    page = _offline_page(browser, server, extra_http_headers=auth)
    response = page.goto(f"{server['url']}/v1/runs/{report.json()['run_id']}/report")
    assert response.status == 200
    assert "default-src 'none'" in response.headers["content-security-policy"]
    assert page.locator("#popover").is_hidden()
    page.locator("mark.hl").first.click()  # the report's own script opens the popover
    page.locator("#popover").wait_for(state="visible")
    assert page.locator("#popover .pop-item").count() >= 1
    assert not [p for p in page.problems if "Content Security Policy" in p], page.problems
    assert page.blocked == [], page.blocked
