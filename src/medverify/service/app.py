"""The HTTP service: thin routes over the library (see docs/service.md and docs/api.md).

``create_app(config)`` builds the FastAPI app (lifespan, middleware, error handlers) over
the route groups of :mod:`medverify.service.routes`; ``app_from_env()`` is the factory
``medverify serve`` gives uvicorn (each worker process builds its own app and loads the KB,
model and judge once, at start-up, and sends its log lines as ``[service]`` says:
:mod:`medverify.service.logs`). Request and response bodies are the project's records,
so the OpenAPI schema (``/openapi.json``, the page at ``/docs``) is generated from them.
Every request gets an id, its metrics and its log line (:mod:`medverify.service.observe`).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.routing import APIRoute
from starlette.datastructures import MutableHeaders

from medverify.config import Config, ServiceSettings
from medverify.connections import create_private_folders
from medverify.llm.observe import add_observer, remove_observer
from medverify.service.auth import client_address
from medverify.service.docs_pages import docs_router
from medverify.service.errors import BodyGuard, install_error_handlers
from medverify.service.jobs import JobRunner
from medverify.service.logs import configure_logging
from medverify.service.metrics import ServiceMetrics, multiprocess, serve_metrics
from medverify.service.observe import Message, Receive, RequestObserver, Scope, Send
from medverify.service.records import ErrorResponse
from medverify.service.routes import ROUTERS
from medverify.service.state import ServiceState
from medverify.service.ui import router as review_pages

API_VERSION = "v1"
"""The API's version (the ``/v1/`` of the paths): ``info.version`` of ``/openapi.json`` and
of the pinned docs/openapi.json alike; ``GET /healthz`` reports the package version."""

CONFIG_ENV = "MEDVERIFY_SERVE_CONFIG"
"""``medverify serve`` passes the worker processes their config as JSON in this variable."""

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": text} for code, text in {
        400: "invalid_json: the body is not JSON in UTF-8",
        401: "unauthorized: missing, wrong or revoked key (not /healthz, /readyz)",
        403: "forbidden: the key's role is too low for this endpoint",
        404: "not_found: no such job, run, key, review item or KB change for this key (or "
             "no such path)",
        409: "not_configured: the feature needs configuration the service lacks; "
             "item_closed, already_labelled: the review item takes no label from this key; "
             "own_key, last_admin: a key cannot revoke itself or the last active admin key",
        413: "too_large: body over max_body_bytes, or a job over max_answers_per_job",
        415: "unsupported_media_type: a POST body that is not application/json",
        422: "invalid_request (the body or a parameter does not validate) or "
             "invalid_input (an answer the checker refuses, e.g. empty)",
        429: "rate_limited: over the key's rate limit, or the address's limit on requests "
             "without a valid key; see the Retry-After header",
        500: "internal: an unexpected error (the server log has the details)",
        503: "not_ready: the KB or models did not load (see /readyz); overloaded: no "
             "check slot came free within queue_wait_s (see the Retry-After header); "
             "too_long: the answer should take too long to check within the request "
             "(submit it as a job)",
        504: "timeout: no result within request_timeout_s"}.items()}

_ROUTE_OPTIONS = tuple(name for name in inspect.signature(APIRouter.add_api_route).parameters
                       if name not in {"self", "path", "endpoint", "route_class_override"})
"""What ``add_api_route`` takes of a route besides its path and endpoint: every one is an
attribute of the route (its tags, status code, response model, responses, name, ...)."""


def create_app(config: Config, *, run_jobs: bool = True) -> FastAPI:
    """The service over ``config`` (its KB, model, judge, run store and ``[service]``
    limits). ``run_jobs=False`` leaves queued jobs to other workers (tests)."""
    metrics = ServiceMetrics(config) if config.service.metrics else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = ServiceState.open(config)
        state.metrics = metrics
        _private_folder(state.jobs_dir)
        await asyncio.to_thread(state.load)
        if metrics is not None and state.checker is not None:
            metrics.watch_kb(state.checker.kb)  # a KB on PostgreSQL: its generations
            card = getattr(state.checker.judge, "card", None)
            metrics.calibration.labels(card.card_id if card else "none",
                                       card.judge if card else "none").set(1)
        state.finish_teaching()
        await state.time_a_check()  # admission sizes long answers from the first request
        app.state.service = state
        runner = JobRunner(state)
        if run_jobs:
            runner.start()
        try:
            with _watching(metrics, config.service):
                yield
        finally:
            await runner.stop()
            await state.aclose()

    app = FastAPI(title="medverify", version=API_VERSION, lifespan=lifespan, responses=ERRORS,
                  docs_url=None, redoc_url=None,  # docs_pages: the pages without a CDN
                  description="Checks what medical LLM answers claim. Every request but the "
                  "health checks needs an API key: `Authorization: Bearer <key>`.")
    install_error_handlers(app)
    app.add_middleware(WriteAudit)  # plain ASGI: no task and streams per request
    app.add_middleware(BodyGuard, max_bytes=config.service.max_body_bytes)
    app.add_middleware(RequestObserver, metrics=metrics,  # outermost: sees every request
                       access_log=config.service.access_log)
    for router in ROUTERS:
        _declare(app, router)
    app.include_router(review_pages)  # the review UI (docs/review.md)
    app.include_router(docs_router())  # /docs, /redoc and their assets (no CDN)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI schema (built once per app): FastAPI's, with every error response (4xx,
    5xx) documented as the JSON it is. FastAPI files an operation's error responses under
    the route's own media type, so the HTML report and the metrics claimed HTML or text
    errors."""
    fresh = app.openapi_schema is None
    schema = FastAPI.openapi(app)
    if fresh:
        for operation in (op for item in schema.get("paths", {}).values()
                          for op in item.values() if isinstance(op, dict)):
            for status, response in operation.get("responses", {}).items():
                content = response.get("content")
                if status[0] in "45" and content and "application/json" not in content:
                    response["content"] = {"application/json": next(iter(content.values()))}
    return schema


def _private_folder(folder: Path) -> None:
    """The jobs' output folder (answers and fetched pages of audit jobs), made 0700: missing
    folders above it are created 0700 too, and the folder itself is set 0700 even when it
    exists (an earlier version made it 0755)."""
    create_private_folders(folder)
    folder.mkdir(mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)


def _declare(app: FastAPI, router: APIRouter) -> None:
    """Declare ``router``'s routes on ``app`` itself, as if written ``@app.get(...)``: the
    app's error responses and dependency overrides apply to them, and ``app.routes`` lists
    each one (``include_router`` adds one lazy entry for the whole router), which the API
    reference reads (scripts/gen_api_docs.py: the role each route needs)."""
    for route in router.routes:
        assert isinstance(route, APIRoute)
        options = {name: getattr(route, name) for name in _ROUTE_OPTIONS}
        app.router.add_api_route(route.path, route.endpoint, **options)


@contextmanager
def _watching(metrics: ServiceMetrics | None, settings: ServiceSettings) -> Iterator[None]:
    """While the worker runs, its metrics observe its model calls; with ``metrics_port``
    and one process they are served there too (several workers: by ``medverify serve``'s
    parent process)."""
    if metrics is None:
        yield
        return
    add_observer(metrics)
    server = None
    if settings.metrics_port is not None and not multiprocess():
        server = serve_metrics(metrics.registry, settings.metrics_host, settings.metrics_port)
    try:
        yield
    finally:
        remove_observer(metrics)
        if server is not None:
            server.shutdown()
            server.server_close()


def app_from_env() -> FastAPI:
    """The app of one ``medverify serve`` worker (config from :data:`CONFIG_ENV`), its log
    lines set up as ``[service]`` says."""
    config = Config.model_validate(json.loads(os.environ.get(CONFIG_ENV) or "{}"))
    configure_logging(config.service)
    return create_app(config)


class WriteAudit:
    """ASGI middleware (plain, so a request costs it one wrapped ``send``, not the task,
    streams and copies of ``BaseHTTPMiddleware``): every write (and every refused key) goes
    to the audit log, recorded as the response starts and before it is sent: key id,
    action, target, status. Refusals of requests without a valid key (401, the per-address
    429, a write to an unknown path) are counted per address and minute, not written one
    row each (:mod:`medverify.service.refusals`: at most two rows an address a minute). A
    405 names in ``Allow`` every method the path takes (Starlette names only those of the
    first route whose path matched: ``DELETE /v1/keys`` said ``Allow: GET`` though ``POST``
    exists). An audit write that fails raises its own error out of the app (answered 500
    ``internal`` by :class:`~medverify.service.observe.RequestObserver`, the response
    unsent), as the ``BaseHTTPMiddleware`` it replaced did."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        failed: list[Exception] = []

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                try:
                    _audit(scope, status)
                except Exception as exc:
                    failed.append(exc)  # the app's exception layer must not answer it
                    raise
                if status == 405:
                    _allow_every_method(scope, message)
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            if failed:  # not the RuntimeError a handled error becomes once a response started
                raise failed[0] from None
            raise


def _url_path(scope: Scope) -> str:
    """The request's path as ``request.url.path`` gives it (``?``, ``#``, ``\\`` escaped)."""
    return Request(scope).url.path


def _audit(scope: Scope, status: int) -> None:
    """The audit log's row (or the refusal tally's count) of a response with ``status``."""
    state = getattr(scope["app"].state, "service", None)
    write = scope["method"] != "GET"
    key = scope.get("state", {}).get("key")
    if state is None or not (write or (key is None and status in (401, 429))):
        return
    route = scope.get("route")
    action = f"{scope['method']} {route.path if hasattr(route, 'path') else _url_path(scope)}"
    if key is None and status >= 400:
        state.refusals.refused(client_address(Request(scope)), action, status)
    else:
        state.audit.record(key.id if key else None, action,
                           target=scope.get("state", {}).get("target"), status=status)


def _allow_every_method(scope: Scope, message: Message) -> None:
    """``Allow`` set as Starlette's ``response.headers["Allow"] = ...`` sets it: in the
    place of the first one, the others dropped."""
    methods = _methods_of(scope["app"], _url_path(scope))
    if not methods:
        return
    headers = MutableHeaders(raw=list(message.get("headers", ())))
    headers["Allow"] = ", ".join(methods)
    message["headers"] = headers.raw


def _methods_of(app: FastAPI, path: str) -> list[str]:
    """Every method of the path template ``path`` resolves to, sorted: that of the first
    route whose pattern matches it (as the router tries them: ``/v1/jobs/check`` is the
    POST route's, not ``/v1/jobs/{job_id}``'s), its methods over every route with it."""
    routes = [r for r in app.routes if getattr(r, "path_regex", None) is not None]
    first = next((r for r in routes if r.path_regex.match(path)), None)  # type: ignore[attr-defined]
    if first is None:
        return []
    template = getattr(first, "path", None)
    return sorted({m for r in routes if getattr(r, "path", None) == template
                   for m in (getattr(r, "methods", None) or ())})
