"""Domain errors are mapped to HTTP once (service/errors.py: DOMAIN_ERRORS, api_error): every
mapped exception gives the same status and code through a JSON route and the same status
and message through a review page; no route or page module maps one by hand; every
ErrorCode has a line in the API reference's CODE_TEXT and every line a code."""

from __future__ import annotations

import ast
import re
import runpy
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from fastapi import APIRouter
from fastapi.testclient import TestClient
from markupsafe import escape

import medverify.service
from medverify.config import Config
from medverify.connections import StoreUnavailable
from medverify.errors import ConfigError, InputError, MedverifyError
from medverify.harness import RunCancelled
from medverify.kb import KnowledgeBase
from medverify.records import Document
from medverify.review import AlreadyLabelled, ItemClosed, ItemNotFound, KBChangeNotFound
from medverify.service.app import create_app
from medverify.service.error_codes import ErrorCode
from medverify.service.errors import DOMAIN_ERRORS, ApiError, api_error
from medverify.service.ui import PageRoute
from medverify.store.access import KeyNotFound, KeyStore, LastAdminKey, Role
from medverify.store.jobs import JobNotFound
from medverify.store.runs import RunStore

ROOT = Path(__file__).resolve().parents[2]

# (exception, status, code, message): written out here, not read from the table.
CASES: list[tuple[MedverifyError, int, str, str]] = [
    (ItemNotFound("no review item 'rv-x'"), 404, "not_found", "no review item 'rv-x'"),
    (KBChangeNotFound("no KB change 7"), 404, "not_found", "no KB change 7"),
    (KeyNotFound("no API key with id 'k1'; `medverify keys list` shows the keys",
                 key_id="k1"), 404, "not_found", "no key 'k1'"),
    (JobNotFound("no job with id 'j1'"), 404, "not_found", "no job with id 'j1'"),
    (ItemClosed("review item rv-x is closed"), 409, "item_closed",
     "review item rv-x is closed"),
    (AlreadyLabelled("k2 has labelled review item rv-x"), 409, "already_labelled",
     "k2 has labelled review item rv-x"),
    (LastAdminKey("key k1 is the last active admin key"), 409, "last_admin",
     "key k1 is the last active admin key"),
    (ConfigError("no risk classifier is configured"), 409, "not_configured",
     "no risk classifier is configured"),
    (InputError("answers[0]: the answer is empty"), 422, "invalid_input",
     "answers[0]: the answer is empty"),
    (StoreUnavailable("the database server cannot be reached"), 503, "store_unavailable",
     "the database server cannot be reached"),
    (RunCancelled("cancelled"), 500, "internal", "RunCancelled: cancelled"),
]
RAISED = {type(exc).__name__: exc for exc, *_ in CASES}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    tmp = tmp_path_factory.mktemp("domain-errors")
    with KnowledgeBase.create(tmp / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="d1", text="Metformin is a first-line medicine.")])
    with RunStore(tmp / "runs.db") as store:
        KeyStore(store).create("reviewer", Role.REVIEWER)
    config = Config(kb=tmp / "kb", store=tmp / "runs.db", cache_path=tmp / "cache.db",
                    decomposer="rules")
    app = create_app(config, run_jobs=False)

    def raising(name: str) -> None:
        raise RAISED[name]

    app.add_api_route("/v1/_raise/{name}", raising, methods=["GET"])
    pages = APIRouter(prefix="/review", route_class=PageRoute)
    pages.add_api_route("/_raise/{name}", raising, methods=["GET"])
    app.include_router(pages)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_every_mapped_exception_has_a_case() -> None:
    covered = {kind for kind in DOMAIN_ERRORS
               if any(type(exc) is kind or (kind is MedverifyError
                                            and type(exc) not in DOMAIN_ERRORS)
                      for exc, *_ in CASES)}
    assert covered == set(DOMAIN_ERRORS)


@pytest.mark.parametrize(("exc", "status", "code", "message"), CASES,
                         ids=[type(c[0]).__name__ for c in CASES])
def test_a_domain_error_through_a_json_route(client: TestClient, exc: MedverifyError,
                                             status: int, code: str, message: str) -> None:
    response = client.get(f"/v1/_raise/{type(exc).__name__}")
    assert response.status_code == status
    assert response.json() == {"error": {"code": code, "message": message, "detail": None}}
    if isinstance(exc, StoreUnavailable):
        assert response.headers["retry-after"] == "5"


@pytest.mark.parametrize(("exc", "status", "code", "message"), CASES,
                         ids=[type(c[0]).__name__ for c in CASES])
def test_a_domain_error_through_a_page(client: TestClient, exc: MedverifyError,
                                       status: int, code: str, message: str) -> None:
    response = client.get(f"/review/_raise/{type(exc).__name__}")
    assert response.status_code == status
    assert response.headers["content-type"].startswith("text/html")
    assert str(escape(message)) in response.text
    assert "content-security-policy" in response.headers
    if isinstance(exc, StoreUnavailable):
        assert response.headers["retry-after"] == "5"


def test_an_unknown_review_item_is_the_same_404_as_json_and_as_a_page(
        client: TestClient) -> None:
    with RunStore(client.app.state.service.config.store) as store:  # type: ignore[attr-defined]
        secret = KeyStore(store).create("second reviewer", Role.REVIEWER).secret
    api = client.get("/v1/review/items/rv-none", headers={"Authorization": f"Bearer {secret}"})
    assert api.status_code == 404
    assert api.json()["error"] == {"code": "not_found", "message": "no review item 'rv-none'",
                                   "detail": None}
    login = client.get("/review/login")
    token = re.search(r'name="csrf" value="([^"]+)"', login.text)
    assert token is not None
    client.post("/review/login", data={"csrf": token.group(1), "key": secret},
                follow_redirects=False)
    page = client.get("/review/items/rv-none")
    assert page.status_code == 404
    assert str(escape("no review item 'rv-none'")) in page.text
    assert "No such item" in page.text


def test_api_error_takes_the_nearest_listed_base() -> None:
    class Narrower(ItemClosed):
        pass

    error = api_error(Narrower("review item rv-y is closed"))
    assert (error.status, error.code, error.message) == (409, ErrorCode.ITEM_CLOSED,
                                                         "review item rv-y is closed")
    assert api_error(StoreUnavailable("down")).headers == {"Retry-After": "5"}


def test_a_code_outside_the_enum_cannot_be_written() -> None:
    with pytest.raises(ValueError):
        ApiError(404, "no_such_code", "x")  # type: ignore[arg-type]


def test_every_error_code_has_a_line_in_the_reference_and_back() -> None:
    gen = runpy.run_path(str(ROOT / "scripts" / "gen_api_docs.py"))
    assert set(gen["CODE_TEXT"]) == {code.value for code in ErrorCode}
    assert {code for _, code in gen["error_codes"]()} <= set(gen["CODE_TEXT"])


# -- no module maps a domain error by hand ------------------------------------------------

DOMAIN_NAMES = {kind.__name__ for kind in DOMAIN_ERRORS}
BY_HAND = {"ApiError", "error_response"}


def _caught(handler: ast.ExceptHandler) -> set[str]:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {k.id if isinstance(k, ast.Name) else k.attr for k in kinds
            if isinstance(k, ast.Name | ast.Attribute)}


def _by_hand(node: ast.AST) -> bool:
    """Whether ``node`` writes a status or code itself: an ApiError or error_response, an
    ErrorCode member, or an HTTP error status as a number."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) \
                and inner.func.id in BY_HAND:
            return True
        if isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name) \
                and inner.value.id == "ErrorCode":
            return True
        if isinstance(inner, ast.Constant) and type(inner.value) is int \
                and 400 <= inner.value < 600:
            return True
    return False


def hand_mappings(source: str) -> list[int]:
    """Lines of ``except`` clauses that catch a domain error and answer it by hand."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ExceptHandler) and node.type is not None
            and _caught(node) & DOMAIN_NAMES and any(_by_hand(s) for s in node.body)]


def test_the_check_finds_a_hand_mapping() -> None:
    old = ("try:\n    item = state.review.assign(item_id, key.id)\n"
           "except ItemNotFound:\n    raise ApiError(404, 'not_found', 'no item') from None\n"
           "except (ItemClosed, ValueError) as exc:\n"
           "    raise Refusal(409, 'Item closed', str(exc)) from None\n"
           "except KeyError:\n    raise ApiError(404, 'not_found', 'x') from None\n")
    assert hand_mappings(old) == [3, 5]


def test_no_route_or_page_maps_a_domain_error_by_hand() -> None:
    folder = Path(medverify.service.__file__).parent
    found = {str(path.relative_to(folder)): lines for path in sorted(folder.rglob("*.py"))
             if (lines := hand_mappings(path.read_text("utf-8")))}
    assert found == {}, f"map domain errors with DOMAIN_ERRORS / api_error: {found}"


def written_codes(source: str) -> list[tuple[int, str]]:
    """(line, code) of every ApiError/error_response that writes its code as a literal, not
    an ErrorCode member (a variable holding one, e.g. a DOMAIN_ERRORS row's, is typed)."""
    return [(node.lineno, ast.unparse(node.args[1])) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in BY_HAND and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)]


def test_every_code_the_service_writes_is_an_error_code_member() -> None:
    assert written_codes("ApiError(404, 'not_found', 'x')\n"
                         "error_response(500, ErrorCode.INTERNAL, 'y')\n") == [(1, "'not_found'")]
    folder = Path(medverify.service.__file__).parent
    found = {str(path.relative_to(folder)): codes for path in sorted(folder.rglob("*.py"))
             if (codes := written_codes(path.read_text("utf-8")))}
    assert found == {}, f"write codes as ErrorCode members: {found}"
