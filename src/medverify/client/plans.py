"""The plumbing the blocking and the asyncio client share: a request as a :class:`Call`,
a *plan* (a generator that yields the next call to send, or a :class:`Sleep`, and returns
the parsed record), the retries of a 429 after its ``Retry-After`` (never of a 503
``overloaded``: see :class:`~medverify.client.errors.Overloaded`), the parsing of responses
and error bodies into records or :class:`~medverify.client.errors.ServiceError`, and the
keyword arguments of an httpx request."""

from __future__ import annotations

import email.utils
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from medverify.client.errors import Overloaded, RateLimited, ServiceError, TooLong
from medverify.service.records import ErrorResponse

T = TypeVar("T")

MAX_RETRY_AFTER_S = 60.0  # the longest a 429's Retry-After is honoured
DEFAULT_RETRY_AFTER_S = 1.0  # a 429 without a usable Retry-After
_BODY_PREVIEW = 200


@dataclass(frozen=True)
class Call:
    """One request: what a client sends, and how its response becomes a record."""

    method: str
    path: str
    parse: Callable[[Call, httpx.Response], Any]
    body: BaseModel | None = None
    params: dict[str, str | int] = field(default_factory=dict)
    auth: bool = True
    accept: tuple[int, ...] = ()  # non-2xx statuses whose body is still the answer


@dataclass(frozen=True)
class Sleep:
    """A pause before the next call: a 429's ``Retry-After``, or a poll's interval."""

    seconds: float


Step = Call | Sleep
Plan = Generator[Step, httpx.Response | None, T]


def call_plan(call: Call, retries_429: int) -> Plan[Any]:
    """Send ``call``; on 429 sleep its Retry-After and send again, ``retries_429`` times.
    A 503 ``overloaded`` is raised at once as :class:`Overloaded`, not retried (the server
    refused before any work; blind retries under overload keep it overloaded)."""
    retried = 0
    while True:
        response = yield call
        assert response is not None
        if response.status_code == 429 and retried < retries_429:
            retried += 1
            after = retry_after(response)
            yield Sleep(min(DEFAULT_RETRY_AFTER_S if after is None else after,
                            MAX_RETRY_AFTER_S))
            continue
        return _result(call, response)


# ----------------------------------------------------------------------- responses


def retry_after(response: httpx.Response) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date; None when absent or unusable."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def _result(call: Call, response: httpx.Response) -> Any:
    if response.is_success:
        return call.parse(call, response)
    if response.status_code in call.accept:  # e.g. /readyz's 503, unless an error body
        try:
            return call.parse(call, response)
        except ServiceError:
            pass
    raise _error(call, response)


def _error(call: Call, response: httpx.Response) -> ServiceError:
    status = response.status_code
    try:
        body = ErrorResponse.model_validate_json(response.content).error
    except ValidationError:
        preview = response.text[:_BODY_PREVIEW].strip() or "(empty body)"
        kind, extra = _kind(response, None)
        return kind(f"{call.method} {call.path} answered HTTP {status} "
                    f"{response.reason_phrase}: {preview}",
                    status=status, code="http_error", **extra)
    kind, extra = _kind(response, body.code)
    return kind(body.message, status=status, code=body.code, detail=body.detail, **extra)


def _kind(response: httpx.Response,
          code: str | None) -> tuple[type[ServiceError], dict[str, Any]]:
    """The error class for a refusal (a 429: :class:`RateLimited`; a 503 whose code is
    ``overloaded``: :class:`Overloaded`, ``too_long``: :class:`TooLong`; else
    :class:`ServiceError`) and its extra arguments (``retry_after``, from the
    ``Retry-After`` header)."""
    if response.status_code == 429:
        return RateLimited, {"retry_after": retry_after(response)}
    if response.status_code == 503 and code == "overloaded":
        return Overloaded, {"retry_after": retry_after(response)}
    if response.status_code == 503 and code == "too_long":
        return TooLong, {}
    return ServiceError, {}


def _bad_response(call: Call, response: httpx.Response, problem: str) -> ServiceError:
    preview = response.text[:_BODY_PREVIEW]
    return ServiceError(f"{call.method} {call.path} answered HTTP {response.status_code} "
                        f"with {problem}: {preview!r}",
                        status=response.status_code, code="bad_response")


class As:
    """Parses a success response into ``kind`` (a record, or a list of them)."""

    def __init__(self, kind: Any) -> None:
        self.adapter: TypeAdapter[Any] = TypeAdapter(kind)

    def __call__(self, call: Call, response: httpx.Response) -> Any:
        try:
            return self.adapter.validate_json(response.content)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "body"
            problem = (f"a body that is not the expected record "
                       f"({where}: {first.get('msg', 'invalid')})")
            raise _bad_response(call, response, problem) from exc


def as_html(call: Call, response: httpx.Response) -> str:
    kind = response.headers.get("content-type", "")
    if "html" not in kind:
        raise _bad_response(call, response, f"content type {kind or '(none)'}, not HTML")
    return response.text


def request_args(call: Call, key: str | None) -> dict[str, Any]:
    """The keyword arguments of ``httpx.Client.request`` (and of the async one) for
    ``call``."""
    headers = {"Accept": "application/json"}
    if call.auth and key:
        headers["Authorization"] = f"Bearer {key}"
    args: dict[str, Any] = {"method": call.method, "url": call.path, "headers": headers}
    if call.params:
        args["params"] = call.params
    if call.body is not None:
        headers["Content-Type"] = "application/json"
        args["content"] = call.body.model_dump_json().encode()
    return args


def unreachable(base_url: str, call: Call, exc: httpx.RequestError) -> ServiceError:
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectTimeout | httpx.ConnectError):
        return ServiceError(f"cannot reach the service at {base_url} ({reason}): is "
                            "`medverify serve` running there?", code="unreachable")
    if isinstance(exc, httpx.TimeoutException):
        return ServiceError(f"{call.method} {call.path} got no answer in time ({reason}): "
                            "raise the client's timeout, or submit the work as a job",
                            code="timeout")
    code = "unreachable" if isinstance(exc, httpx.TransportError) else "request_failed"
    return ServiceError(f"{call.method} {call.path} to {base_url} failed: {reason}",
                        code=code)
