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
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from medverify.connections import StoreUnavailable
from medverify.errors import ConfigError, InputError, MedverifyError
from medverify.review.records import AlreadyLabelled, ItemClosed, ItemNotFound, KBChangeNotFound
from medverify.service.error_codes import ErrorCode
from medverify.service.records import ErrorBody, ErrorResponse
from medverify.store.access import KeyNotFound, LastAdminKey
from medverify.store.jobs import JobNotFound

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_STATUS_CODES = {400: ErrorCode.BAD_REQUEST, 401: ErrorCode.UNAUTHORIZED,
                 403: ErrorCode.FORBIDDEN, 404: ErrorCode.NOT_FOUND,
                 405: ErrorCode.METHOD_NOT_ALLOWED, 409: ErrorCode.CONFLICT,
                 413: ErrorCode.TOO_LARGE, 415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                 422: ErrorCode.INVALID_REQUEST, 429: ErrorCode.RATE_LIMITED,
                 503: ErrorCode.NOT_READY, 504: ErrorCode.TIMEOUT}


_NOT_JSON = "the request body is not valid JSON in UTF-8"
_NOT_NUMBER = ("the request body is not valid JSON: {} is not a JSON number (RFC 8259 has no "
               "NaN or Infinity; send a finite number or null)")


class ApiError(Exception):
    """An error to answer with: HTTP status, code, message (and headers, e.g. Retry-After).
    The code is one of :class:`ErrorCode` (a string that is none of them raises)."""

    def __init__(self, status: int, code: ErrorCode, message: str, *,
                 headers: dict[str, str] | None = None,
                 detail: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, ErrorCode(code), message
        self.headers, self.detail = headers, detail


def error_response(status: int, code: ErrorCode, message: str, *,
                   headers: dict[str, str] | None = None,
                   detail: list[dict[str, Any]] | None = None) -> JSONResponse:
    body = ErrorResponse(error=ErrorBody(code=ErrorCode(code).value, message=message,
                                         detail=detail))
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def _said(exc: Exception) -> str:
    return str(exc)


def _named(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def _no_key(exc: Exception) -> str:
    return f"no key {getattr(exc, 'key_id', '')!r}"


@dataclass(frozen=True)
class DomainError:
    """How the API answers one kind of domain error: status, code, message, headers."""

    status: int
    code: ErrorCode
    message: Callable[[Exception], str] = _said  # the exception's own words by default
    headers: tuple[tuple[str, str], ...] = ()  # e.g. Retry-After: when to try again


DOMAIN_ERRORS: dict[type[MedverifyError], DomainError] = {
    ItemNotFound: DomainError(404, ErrorCode.NOT_FOUND),
    KBChangeNotFound: DomainError(404, ErrorCode.NOT_FOUND),
    KeyNotFound: DomainError(404, ErrorCode.NOT_FOUND, _no_key),
    JobNotFound: DomainError(404, ErrorCode.NOT_FOUND),
    ItemClosed: DomainError(409, ErrorCode.ITEM_CLOSED),
    AlreadyLabelled: DomainError(409, ErrorCode.ALREADY_LABELLED),
    LastAdminKey: DomainError(409, ErrorCode.LAST_ADMIN),
    ConfigError: DomainError(409, ErrorCode.NOT_CONFIGURED),
    InputError: DomainError(422, ErrorCode.INVALID_INPUT),
    StoreUnavailable: DomainError(503, ErrorCode.STORE_UNAVAILABLE,
                                  headers=(("Retry-After", "5"),)),
    MedverifyError: DomainError(500, ErrorCode.INTERNAL, _named),
}
"""Each domain error the service can meet, as the API answers it (the JSON routes through
one exception handler, the review pages as HTML with the same status and message). A
subclass not listed takes its nearest listed base's row (any other MedverifyError: 500
``internal``, its type named)."""


def api_error(exc: MedverifyError) -> ApiError:
    """The :class:`ApiError` a domain error is answered with (:data:`DOMAIN_ERRORS`)."""
    kind = next(k for k in type(exc).__mro__ if k in DOMAIN_ERRORS)
    row = DOMAIN_ERRORS[kind]  # type: ignore[index]
    return ApiError(row.status, row.code, row.message(exc), headers=dict(row.headers) or None)


def _validation(exc: RequestValidationError) -> JSONResponse:
    problems = list(exc.errors())
    if any(p.get("type") == "json_invalid" for p in problems):
        return error_response(400, ErrorCode.INVALID_JSON, _NOT_JSON)
    detail = [{"loc": list(p.get("loc", ())), "msg": str(p.get("msg", "")),
               "type": str(p.get("type", ""))} for p in problems[:20]]
    first = detail[0] if detail else {"loc": [], "msg": "invalid"}
    where = ".".join(str(x) for x in first["loc"][1:]) or "body"
    return error_response(422, ErrorCode.INVALID_REQUEST, f"{where}: {first['msg']}",
                          detail=detail)


def _noted(request: Request, code: ErrorCode) -> ErrorCode:
    """``code``, also kept on the request for its log line and metrics (``state.error``)."""
    request.state.error = code
    return code


def install_error_handlers(app: FastAPI) -> None:
    """Map every exception to the one error shape."""

    @app.exception_handler(ApiError)
    async def refused(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, _noted(request, exc.code), exc.message,
                              headers=exc.headers, detail=exc.detail)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI could not parse the body (e.g. not UTF-8)
            _noted(request, ErrorCode.INVALID_JSON)
            return error_response(400, ErrorCode.INVALID_JSON, _NOT_JSON)
        code = _noted(request, _STATUS_CODES.get(exc.status_code, ErrorCode.ERROR))
        return error_response(exc.status_code, code, str(exc.detail),
                              headers=getattr(exc, "headers", None))

    @app.exception_handler(MedverifyError)
    async def domain_error(request: Request, exc: MedverifyError) -> JSONResponse:
        """Every domain error, by :data:`DOMAIN_ERRORS` (the routes do not catch them)."""
        error = api_error(exc)
        return error_response(error.status, _noted(request, error.code), error.message,
                              headers=error.headers)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response(500, ErrorCode.INTERNAL, f"internal error "
                              f"({type(exc).__name__}); the server log has the details")


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
            refused = error_response(413, ErrorCode.TOO_LARGE, self._too_large())
            await refused(scope, receive, send)
            return
        problem = json_problem(body) if _is_json(headers) else None
        if problem is not None:
            await error_response(400, ErrorCode.INVALID_JSON, problem)(scope, receive, send)
            return
        await self.app(scope, _replay(body), send)

    def _too_large(self) -> str:
        return f"the request body is over {self.max_bytes:,} bytes ([service] max_body_bytes)"

    def _refusal(self, headers: dict[str, str], path: str = "") -> JSONResponse | None:
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return error_response(413, ErrorCode.TOO_LARGE, self._too_large())
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        has_body = (length is not None and length != "0") or "transfer-encoding" in headers
        form = kind == "application/x-www-form-urlencoded" and path.startswith(FORM_PATHS)
        if has_body and kind != "application/json" and not form:
            return error_response(415, ErrorCode.UNSUPPORTED_MEDIA_TYPE,
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
