"""One error shape for every failure, and the middleware that guards the request body.

Every 4xx/5xx response is an :class:`~medverify.service.records.ErrorResponse`:
``{"error": {"code": ..., "message": ..., "detail": ...}}``. Malformed JSON, a body that
is not UTF-8 (UTF-16 too: only UTF-8 JSON is accepted), ``NaN``/``Infinity`` (not JSON
numbers), the wrong content type, unknown fields, oversize bodies: each gets its own code
and a message that says what to do; nothing is written for a request that fails here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from medverify.connections import StoreUnavailable
from medverify.errors import ConfigError, InputError, MedverifyError
from medverify.service.records import ErrorBody, ErrorResponse

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_STATUS_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                 405: "method_not_allowed", 409: "conflict", 413: "too_large",
                 415: "unsupported_media_type", 422: "invalid_request", 429: "rate_limited",
                 503: "not_ready", 504: "timeout"}


_NOT_JSON = "the request body is not valid JSON in UTF-8"
_NOT_NUMBER = ("the request body is not valid JSON: {} is not a JSON number (RFC 8259 has no "
               "NaN or Infinity; send a finite number or null)")


class ApiError(Exception):
    """An error to answer with: HTTP status, code, message (and headers, e.g. Retry-After)."""

    def __init__(self, status: int, code: str, message: str, *,
                 headers: dict[str, str] | None = None,
                 detail: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers, self.detail = headers, detail


def error_response(status: int, code: str, message: str, *,
                   headers: dict[str, str] | None = None,
                   detail: list[dict[str, Any]] | None = None) -> JSONResponse:
    body = ErrorResponse(error=ErrorBody(code=code, message=message, detail=detail))
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def _validation(exc: RequestValidationError) -> JSONResponse:
    problems = list(exc.errors())
    if any(p.get("type") == "json_invalid" for p in problems):
        return error_response(400, "invalid_json", _NOT_JSON)
    detail = [{"loc": list(p.get("loc", ())), "msg": str(p.get("msg", "")),
               "type": str(p.get("type", ""))} for p in problems[:20]]
    first = detail[0] if detail else {"loc": [], "msg": "invalid"}
    where = ".".join(str(x) for x in first["loc"][1:]) or "body"
    return error_response(422, "invalid_request", f"{where}: {first['msg']}", detail=detail)


def _noted(request: Request, code: str) -> str:
    """``code``, also kept on the request for its log line and metrics (``state.error``)."""
    request.state.error = code
    return code


def install_error_handlers(app: FastAPI) -> None:
    """Map every exception to the one error shape."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, _noted(request, exc.code), exc.message,
                              headers=exc.headers, detail=exc.detail)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI could not parse the body (e.g. not UTF-8)
            _noted(request, "invalid_json")
            return error_response(400, "invalid_json", _NOT_JSON)
        code = _noted(request, _STATUS_CODES.get(exc.status_code, "error"))
        return error_response(exc.status_code, code, str(exc.detail),
                              headers=getattr(exc, "headers", None))

    @app.exception_handler(InputError)
    async def input_error(_: Request, exc: InputError) -> JSONResponse:
        return error_response(422, "invalid_input", str(exc))

    @app.exception_handler(ConfigError)
    async def config_error(_: Request, exc: ConfigError) -> JSONResponse:
        return error_response(409, "not_configured", str(exc))

    @app.exception_handler(StoreUnavailable)
    async def store_unavailable(request: Request, exc: StoreUnavailable) -> JSONResponse:
        _noted(request, "store_unavailable")
        return error_response(503, "store_unavailable", str(exc), headers={"Retry-After": "5"})

    @app.exception_handler(MedverifyError)
    async def medverify_error(_: Request, exc: MedverifyError) -> JSONResponse:
        return error_response(500, "internal", f"{type(exc).__name__}: {exc}")

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response(500, "internal", f"internal error ({type(exc).__name__}); "
                              "the server log has the details")


FORM_PATHS = "/review/"
"""The review UI's pages post HTML forms (``application/x-www-form-urlencoded``) under this
path; everywhere else a body must be JSON."""


class BodyGuard:
    """ASGI middleware: refuses bodies over ``max_bytes`` (413, also when the length is not
    declared) and POST/PUT/PATCH bodies that are not JSON (415; the review UI's form posts
    under ``/review/`` excepted), before any handler runs."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        refusal = self._refusal(headers, str(scope.get("path", "")))
        if refusal is not None:
            await _drain(receive)
            await refusal(scope, receive, send)
            return
        body = await self._read(receive)
        if body is None:
            await error_response(413, "too_large", self._too_large())(scope, receive, send)
            return
        problem = json_problem(body) if _is_json(headers) else None
        if problem is not None:
            await error_response(400, "invalid_json", problem)(scope, receive, send)
            return
        await self.app(scope, _replay(body), send)

    def _too_large(self) -> str:
        return f"the request body is over {self.max_bytes:,} bytes ([service] max_body_bytes)"

    def _refusal(self, headers: dict[str, str], path: str = "") -> JSONResponse | None:
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return error_response(413, "too_large", self._too_large())
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        has_body = (length is not None and length != "0") or "transfer-encoding" in headers
        form = kind == "application/x-www-form-urlencoded" and path.startswith(FORM_PATHS)
        if has_body and kind != "application/json" and not form:
            return error_response(415, "unsupported_media_type",
                                  "send the body as JSON with Content-Type: application/json")
        return None

    async def _read(self, receive: Receive) -> bytes | None:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _drain(receive)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _is_json(headers: dict[str, str]) -> bool:
    return headers.get("content-type", "").split(";")[0].strip().lower() == "application/json"


def json_problem(body: bytes) -> str | None:
    """Why ``body`` is not JSON in UTF-8, or None when it is (or is empty: the route says
    what it lacks; a UTF-8 byte order mark is ignored, as RFC 8259 allows). Python's parser
    would take UTF-16 and UTF-32 (it guesses the encoding of bytes) and ``NaN``/``Infinity``;
    the API documents only UTF-8 JSON, so both are refused here, before any handler runs."""
    if not body.strip():
        return None
    try:
        json.loads(body.decode("utf-8-sig"), parse_constant=_not_a_number)
    except UnicodeDecodeError:
        return _NOT_JSON + " (it is not UTF-8; UTF-16 and other encodings are not accepted)"
    except _NotANumber as exc:
        return _NOT_NUMBER.format(exc)
    except ValueError as exc:
        return f"{_NOT_JSON} ({exc})"
    return None


class _NotANumber(ValueError):
    """A ``NaN``, ``Infinity`` or ``-Infinity`` in a body."""


def _not_a_number(constant: str) -> Any:
    raise _NotANumber(constant)


async def _drain(receive: Receive) -> None:
    """Read what is left of a refused body, so the connection can answer."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive
