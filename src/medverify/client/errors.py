"""What a failed request to the service raises: :class:`ServiceError` (with the HTTP
status, the service's machine-readable code, a message and the per-field detail), and its
kinds :class:`RateLimited`, :class:`Overloaded`, :class:`TooLong` and
:class:`WaitTimeout`."""

from __future__ import annotations

from typing import Any

from medverify.errors import MedverifyError
from medverify.service.records import Job


class ServiceError(MedverifyError):
    """A request to the service failed.

    ``status`` is the HTTP status (None when no response came: ``code`` is then
    ``unreachable`` or ``timeout``); ``code`` is the service's machine-readable code
    (``unauthorized``, ``not_found``, ``invalid_input``, ...), ``http_error`` for an error
    response that is not the service's JSON shape, ``bad_response`` for a success response
    that is not the expected record; ``detail`` holds the per-field problems of a request
    that did not validate.
    """

    def __init__(self, message: str, *, status: int | None = None, code: str = "error",
                 detail: list[dict[str, Any]] | None = None) -> None:
        where = f"HTTP {status}, {code}" if status is not None else code
        super().__init__(f"{message} [{where}]")
        self.status = status
        self.code = code
        self.message = message
        self.detail = detail


class RateLimited(ServiceError):
    """429 Too Many Requests, still answered after the client's own retries;
    ``retry_after`` is the server's ``Retry-After`` in seconds (None when absent)."""

    def __init__(self, message: str, *, retry_after: float | None = None,
                 status: int | None = 429, code: str = "rate_limited",
                 detail: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message, status=status, code=code, detail=detail)
        self.retry_after = retry_after


class Overloaded(ServiceError):
    """503 ``overloaded``: the service had no check slot free within its ``[service]
    queue_wait_s`` and refused the request before doing any work (nothing was run or
    stored). ``retry_after`` is the server's ``Retry-After`` in seconds (None when absent).

    The client does **not** retry it by itself, unlike a 429: the server is busy with
    other callers' work, and clients that all retry blindly keep it overloaded (and make
    the queue longer for everyone). Retry later, with backoff, or send fewer requests at
    once (a batch as one job: ``submit_check``).
    """

    def __init__(self, message: str, *, retry_after: float | None = None,
                 status: int | None = 503, code: str = "overloaded",
                 detail: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message, status=status, code=code, detail=detail)
        self.retry_after = retry_after


class TooLong(ServiceError):
    """503 ``too_long``: the answer is predicted to take longer to check than a request may
    work (``[service] sync_work_share`` of ``request_timeout_s``), even on an idle service;
    nothing was run or stored. Retrying will not help: submit it as a job
    (``submit_check``), which has no time limit."""

    def __init__(self, message: str, *, status: int | None = 503, code: str = "too_long",
                 detail: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message, status=status, code=code, detail=detail)


class WaitTimeout(ServiceError, TimeoutError):
    """:meth:`Client.wait` gave up: the job was not finished within ``timeout_s``;
    ``job`` is its last state (it goes on running on the server)."""

    def __init__(self, message: str, job: Job) -> None:
        super().__init__(message, code="wait_timeout")
        self.job = job
