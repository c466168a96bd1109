"""Each request observed: its id, its metrics, its log line (docs/operations.md).

:class:`RequestObserver` is the app's outermost middleware (plain ASGI, so it adds little
to a request). A request's id is its ``X-Request-ID`` header when that is a sane token (1 to
64 letters, digits and ``._:-``), else a new random one; the response carries it back in
``X-Request-ID``, every log line written while serving it carries it, and so does every run
it records (:mod:`medverify.store.context`). An error nothing else handled is logged here,
with the id, and answered with the one error shape (500 ``internal``). When the response is
sent, the request is counted (:class:`~medverify.service.metrics.ServiceMetrics`) and one
line is logged at ``info`` on ``medverify.service.access``: method, route template, status,
duration, key id (never the secret), what it acted on, the error code of a refusal, and the
claims it checked by category and decision (the route leaves them as
``request.state.checked``, a :class:`~medverify.service.metrics.Checked`; they are counted
here, after the response).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.routing import Match

from medverify.service.error_codes import ErrorCode
from medverify.service.errors import error_response
from medverify.service.metrics import UNMATCHED, ServiceMetrics
from medverify.store.context import request_id

access = logging.getLogger("medverify.service.access")
errors = logging.getLogger("medverify.service.errors")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

HEADER = "x-request-id"
_SANE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")


def accepted_id(value: str | None) -> str:
    """``value`` when it is a sane request id, else a new one (32 hex characters)."""
    if value is not None and _SANE.fullmatch(value):
        return value
    return uuid.uuid4().hex


def route_of(scope: Scope) -> str | None:
    """The template of the route that served the request (``/v1/runs/{run_id}``): the one
    routing chose, or for a request refused before routing (a body over the limit) the
    route it was for; None when no route matches its path."""
    route = scope.get("route")
    if route is not None:
        return getattr(route, "path", None)
    for candidate in getattr(getattr(scope.get("app"), "router", None), "routes", ()):
        if candidate.matches(scope)[0] is Match.FULL:
            return getattr(candidate, "path", None)
    return None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


class RequestObserver:
    """ASGI middleware: the request's id, metrics and log line (see the module)."""

    def __init__(self, app: Any, metrics: ServiceMetrics | None, access_log: bool) -> None:
        self.app, self.metrics, self.access_log = app, metrics, access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = accepted_id(_header(scope, HEADER.encode()))
        state = scope.setdefault("state", {})
        status = 0  # none sent yet
        header = (HEADER.encode(), rid.encode())

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        request_id.set(rid)  # this request's task only (each request runs in its own)
        started = time.perf_counter()
        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if status:  # the response had started: nothing else can be sent
                raise
            errors.exception("unhandled error")  # with the request's id, and its traceback
            state["error"] = ErrorCode.INTERNAL
            refused = error_response(500, ErrorCode.INTERNAL, f"internal error "
                                     f"({type(exc).__name__}); the server log has the details")
            await refused(scope, receive, sending)
        finally:
            self._done(scope, state, status or 500, time.perf_counter() - started)

    def _done(self, scope: Scope, state: MutableMapping[str, Any], status: int,
              seconds: float) -> None:
        route = route_of(scope)
        error, checked = state.get("error"), state.get("checked")
        if self.metrics is not None:
            self.metrics.request(route, scope["method"], status, seconds, error)
            if checked is not None:  # counted after the response: not in its latency
                self.metrics.checked(checked, "request")
        if not self.access_log or not access.isEnabledFor(logging.INFO):
            return
        key = state.get("key")
        fields: dict[str, Any] = {
            "method": scope["method"], "route": route or UNMATCHED, "status": status,
            "duration_ms": round(1000 * seconds, 2), "key_id": getattr(key, "id", None),
            "target": state.get("target"), "error": error}
        fields.update(checked.fields() if checked is not None else {})
        access.info("request", extra={"fields": fields})
