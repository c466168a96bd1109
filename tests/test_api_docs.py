"""docs/openapi.json and docs/api.md are generated from the service's app
(scripts/gen_api_docs.py): they fail here when they are stale, and every route must be in
docs/api.md."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi.routing import APIRoute

ROOT = Path(__file__).resolve().parents[1]
REGENERATE = "run `python scripts/gen_api_docs.py`"


@pytest.fixture(scope="module")
def gen() -> dict[str, Any]:
    return runpy.run_path(str(ROOT / "scripts" / "gen_api_docs.py"))


@pytest.fixture(scope="module")
def rendered(gen: dict[str, Any]) -> dict[Path, str]:
    return gen["render"]()  # type: ignore[no-any-return]


def test_the_pinned_openapi_schema_is_up_to_date(rendered: dict[Path, str]) -> None:
    path = ROOT / "docs" / "openapi.json"
    assert path.read_text("utf-8") == rendered[path], f"docs/openapi.json is stale: {REGENERATE}"


def test_the_api_reference_is_up_to_date(rendered: dict[Path, str]) -> None:
    path = ROOT / "docs" / "api.md"
    assert path.read_text("utf-8") == rendered[path], f"docs/api.md is stale: {REGENERATE}"


def test_every_route_of_the_app_is_in_the_reference(gen: dict[str, Any]) -> None:
    app, _ = gen["build"]()
    doc = (ROOT / "docs" / "api.md").read_text("utf-8")
    routes = [(method, route.path) for route in app.routes
              if getattr(route, "include_in_schema", True)  # the review UI's HTML pages
              for method in sorted(getattr(route, "methods", None) or ()) if method != "HEAD"]
    assert len(routes) >= 16
    missing = [f"{m} {p}" for m, p in routes if f"`{m} {p}`" not in doc]
    assert not missing, f"routes missing from docs/api.md: {missing}"


def test_every_endpoint_but_the_health_checks_needs_a_key(gen: dict[str, Any]) -> None:
    app, _ = gen["build"]()
    open_routes = {route.path for route in app.routes
                   if isinstance(route, APIRoute) and route.include_in_schema
                   and gen["route_role"](route) is None}
    assert open_routes == {"/healthz", "/readyz"}


def test_the_pinned_schema_holds_no_package_version(rendered: dict[Path, str]) -> None:
    from medverify.records import package_version as version

    schema = json.loads(rendered[ROOT / "docs" / "openapi.json"])
    assert schema["info"]["version"] == "v1"
    assert f'"{version()}"' not in rendered[ROOT / "docs" / "openapi.json"]


def test_building_the_schema_opens_nothing(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``app.openapi()`` does not run the lifespan: no store, KB or model is opened."""
    from medverify.config import Config
    from medverify.service.app import create_app

    monkeypatch.setenv("MEDVERIFY_HOME", str(tmp_path / "home"))
    config = Config(kb=tmp_path / "kb", store=tmp_path / "store" / "runs.db")
    schema = create_app(config).openapi()
    assert "/v1/check" in schema["paths"]
    assert not (tmp_path / "store").exists() and not (tmp_path / "home").exists()


def test_every_error_code_is_in_the_reference(gen: dict[str, Any]) -> None:
    doc = (ROOT / "docs" / "api.md").read_text("utf-8")
    codes = gen["error_codes"]()
    assert {"unauthorized", "rate_limited", "too_large", "timeout"} <= {c for _, c in codes}
    for status, code in codes:
        assert f"| {status} | `{code}` |" in doc, (status, code)
