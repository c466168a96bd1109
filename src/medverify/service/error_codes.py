"""The service's error codes: the one closed list of what ``error.code`` may say.

Every error the API answers (:class:`~medverify.service.errors.ApiError`,
:func:`~medverify.service.errors.error_response`, the table of domain errors
:data:`~medverify.service.errors.DOMAIN_ERRORS`, the metrics' refusal series) names one of
these; a code that is not here cannot be written (``ErrorCode("typo")`` raises). Each has a
line in ``scripts/gen_api_docs.py``'s ``CODE_TEXT`` (a test checks both ways), and
docs/api.md lists those the service's code answers with their status.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """A machine-readable error code (its value is what ``error.code`` carries)."""

    BAD_REQUEST = "bad_request"
    INVALID_JSON = "invalid_json"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    CONFLICT = "conflict"
    NOT_CONFIGURED = "not_configured"
    ITEM_CLOSED = "item_closed"
    ALREADY_LABELLED = "already_labelled"
    OWN_KEY = "own_key"
    LAST_ADMIN = "last_admin"
    TOO_LARGE = "too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    INVALID_REQUEST = "invalid_request"
    INVALID_INPUT = "invalid_input"
    RATE_LIMITED = "rate_limited"
    INTERNAL = "internal"
    ERROR = "error"
    NOT_READY = "not_ready"
    OVERLOADED = "overloaded"
    TOO_LONG = "too_long"
    STORE_UNAVAILABLE = "store_unavailable"
    TIMEOUT = "timeout"
