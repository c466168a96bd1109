"""Who is asking: API keys with roles, a per-key rate limit, and a per-address limit on
requests without a valid key.

A request names its key as ``Authorization: Bearer <secret>`` (or ``X-API-Key``). Keys are
stored hashed in the run store (:class:`medverify.store.access.KeyStore`); a missing,
malformed, wrong or revoked key is 401, a key whose role is too low for the endpoint 403.
Each key may make ``[service] rate_per_minute`` requests a minute, in bursts of up to
``rate_burst`` (a token bucket per key and worker process); over it: 429 with
``Retry-After``.

Before any key is looked at, the client's address is checked against its own bucket:
each request from it without a valid key (none, malformed, unknown, wrong, revoked) takes
a token (``[service] auth_failures_per_minute``, ``auth_failure_burst``); an address with
none left gets 429 with ``Retry-After`` for every request that needs a key, a valid one
included, until a token is due. Requests with a valid key take nothing from it. The
review UI's login form (:mod:`medverify.service.ui`) checks the key it is given through
the same limit (:func:`verify_within_limit`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import Request

from medverify.service.error_codes import ErrorCode
from medverify.service.errors import ApiError
from medverify.store.access import KeyInfo, KeyStore, Role


@dataclass
class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up."""

    rate: float
    burst: float
    clock: Callable[[], float] = time.monotonic
    _tokens: dict[str, tuple[float, float]] = field(default_factory=dict)
    _prune_at: int = 1024

    def take(self, key: str) -> float:
        """Take a token for ``key``: 0.0 when granted, else the seconds until one is due."""
        now = self.clock()
        tokens = self._level(key, now)
        if tokens >= 1.0:
            self._tokens[key] = (tokens - 1.0, now)
            self._prune(now)
            return 0.0
        self._tokens[key] = (tokens, now)
        return (1.0 - tokens) / self.rate

    def due(self, key: str) -> float:
        """The seconds until ``key`` has a token (0.0: it has one now), taking nothing."""
        tokens = self._level(key, self.clock())
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    def _level(self, key: str, now: float) -> float:
        tokens, last = self._tokens.get(key, (self.burst, now))
        return min(self.burst, tokens + (now - last) * self.rate)

    def _prune(self, now: float) -> None:
        """Forget the keys whose bucket has refilled (a new one starts full anyway), once
        the table has doubled since the last time: memory stays bounded by the keys (or
        addresses) active within one refill time."""
        if len(self._tokens) < self._prune_at:
            return
        self._tokens = {k: v for k, v in self._tokens.items()
                        if self._level(k, now) < self.burst}
        self._prune_at = max(1024, 2 * len(self._tokens))


def retry_seconds(wait: float) -> int:
    """``wait`` as the whole seconds a ``Retry-After`` header (and its message) says."""
    return max(1, math.ceil(wait))


def client_address(request: Request) -> str:
    """The client's address as the server saw it (uvicorn takes it from
    ``X-Forwarded-For`` only when the peer is a trusted proxy: ``--forwarded-allow-ips``,
    127.0.0.1 by default)."""
    return request.client.host if request.client is not None else "unknown"


def presented_secret(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.headers.get("x-api-key") or None


def authorize(request: Request, needed: Role) -> KeyInfo:
    """The key making ``request``, checked for ``needed`` and the rate limit; records it on
    ``request.state.key`` for the audit log."""
    state = request.app.state.service
    key = _identify(request)
    request.state.key = key
    if not key.role.allows(needed):
        raise ApiError(403, ErrorCode.FORBIDDEN, f"this endpoint needs the {needed.value} "
                       f"role; the key {key.id} has {key.role.value}")
    wait = state.limiter.take(key.id)
    if wait > 0:
        raise _limited(f"over {state.config.service.rate_per_minute} requests a minute for "
                       f"key {key.id}", wait)
    return key


def _identify(request: Request) -> KeyInfo:
    """The valid key ``request`` presents; 429 before looking when its address is out of
    tokens for requests without one, else 401 (taking a token) when it has none."""
    secret = presented_secret(request)
    key = verify_within_limit(request, secret)
    if key is None:
        problem = ("no API key: send Authorization: Bearer <key> (create one with "
                   "`medverify keys create NAME`)" if secret is None
                   else "the API key is unknown, wrong or revoked")
        raise ApiError(401, ErrorCode.UNAUTHORIZED, problem,
                       headers={"WWW-Authenticate": "Bearer"})
    return key


def verify_within_limit(request: Request, secret: str | None) -> KeyInfo | None:
    """The valid key ``secret`` names, under the per-address limit on requests without
    one: when the client's address is out of tokens, an :class:`ApiError` 429
    ``rate_limited`` with ``Retry-After`` (the only error it raises) before the secret is
    even looked at, so a correct key is refused too until a token is due; else None,
    taking a token, when ``secret`` is missing or not a valid key. The API's key check and
    the review UI's login form both go through here."""
    state = request.app.state.service
    keys: KeyStore = state.keys
    limiter: TokenBucket = state.address_limiter
    address = client_address(request)
    wait = limiter.due(address)
    if wait > 0:
        raise _limited(f"over {state.config.service.auth_failures_per_minute} requests a "
                       f"minute without a valid API key from {address}", wait)
    key = keys.verify(secret) if secret else None
    if key is None:
        limiter.take(address)
    return key


def _limited(what: str, wait: float) -> ApiError:
    """429 ``rate_limited``: the message and ``Retry-After`` give the same whole seconds."""
    retry = retry_seconds(wait)
    return ApiError(429, ErrorCode.RATE_LIMITED, f"{what}; retry after {retry} s",
                    headers={"Retry-After": str(retry)})


def role(needed: Role) -> Callable[[Request], KeyInfo]:
    """A FastAPI dependency: the calling key, with at least the ``needed`` role."""

    async def dependency(request: Request) -> KeyInfo:  # async: the store is this thread's
        return authorize(request, needed)

    return dependency
