"""Who is asking: API keys with roles, and a per-key rate limit.

A request names its key as ``Authorization: Bearer <secret>`` (or ``X-API-Key``). Keys are
stored hashed in the run store (:class:`medverify.store.access.KeyStore`); a missing,
malformed, wrong or revoked key is 401, a key whose role is too low for the endpoint 403.
Each key may make ``[service] rate_per_minute`` requests a minute, in bursts of up to
``rate_burst`` (a token bucket per key and worker process); over it: 429 with
``Retry-After``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import Request

from medverify.service.errors import ApiError
from medverify.store.access import KeyInfo, Role


@dataclass
class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up."""

    rate: float
    burst: float
    clock: Callable[[], float] = time.monotonic
    _tokens: dict[str, tuple[float, float]] = field(default_factory=dict)

    def take(self, key: str) -> float:
        """Take a token for ``key``: 0.0 when granted, else the seconds until one is due."""
        now = self.clock()
        tokens, last = self._tokens.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens >= 1.0:
            self._tokens[key] = (tokens - 1.0, now)
            return 0.0
        self._tokens[key] = (tokens, now)
        return (1.0 - tokens) / self.rate


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
    secret = presented_secret(request)
    if secret is None:
        raise ApiError(401, "unauthorized", "no API key: send Authorization: Bearer <key> "
                       "(create one with `medverify keys create NAME`)",
                       headers={"WWW-Authenticate": "Bearer"})
    key = state.keys.verify(secret)
    if key is None:
        raise ApiError(401, "unauthorized", "the API key is unknown, wrong or revoked",
                       headers={"WWW-Authenticate": "Bearer"})
    request.state.key = key
    if not key.role.allows(needed):
        raise ApiError(403, "forbidden", f"this endpoint needs the {needed.value} role; the "
                       f"key {key.id} has {key.role.value}")
    wait = state.limiter.take(key.id)
    if wait > 0:
        raise ApiError(429, "rate_limited", f"over {state.config.service.rate_per_minute} "
                       f"requests a minute for key {key.id}; retry after {wait:.1f} s",
                       headers={"Retry-After": str(max(1, math.ceil(wait)))})
    return key


def role(needed: Role) -> Callable[[Request], KeyInfo]:
    """A FastAPI dependency: the calling key, with at least the ``needed`` role."""

    async def dependency(request: Request) -> KeyInfo:  # async: the store is this thread's
        return authorize(request, needed)

    return dependency
