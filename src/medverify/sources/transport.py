"""The fetcher's way out to the network: :class:`PinnedBackend` (connects only to an
address the fetcher checked for that host:port: DNS pinning, no second lookup) and
:class:`OriginPools` (one small httpcore pool per origin, idle ones closed LRU). Importing
it makes httpcore's ``import sniffio`` fail fast when sniffio is not installed.
"""

from __future__ import annotations

import importlib.util
import ssl
import sys
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import httpcore

from medverify.records import FetchFailure
from medverify.sources.safety import FetchProblem, UrlCheck


def _fail_fast_without_sniffio() -> None:
    """httpcore tries ``import sniffio`` for every lock and event it creates (several per
    request). Without sniffio installed, each failed import walks ``sys.path`` again
    (about 0.4 ms: 2.5 s of CPU per 1,000 fetches). A ``None`` entry in ``sys.modules``
    makes that import fail at once; it is set only when sniffio cannot be found at all.
    """
    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


_fail_fast_without_sniffio()


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Network backend that connects only to addresses the fetcher checked.

    The HTTP layer asks for ``host:port``; this backend looks up the address pinned for
    it after the DNS check and connects there, so no second DNS lookup happens (no DNS
    rebinding) and TLS still verifies the certificate against the host name. A host:port
    that was never pinned is refused.
    """

    def __init__(self, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.AnyIOBackend()
        self._pins: dict[tuple[str, int], str] = {}

    def pin(self, host: str, port: int, ip: str) -> None:
        self._pins[(host.lower(), port)] = ip

    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None,
        local_address: str | None = None, socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        ip = self._pins.get((host.lower(), port))
        if ip is None:
            raise FetchProblem(FetchFailure.BLOCKED, f"{host}:{port} was not checked")
        return await self._inner.connect_tcp(ip, port, timeout=timeout,
                                              local_address=local_address,
                                              socket_options=socket_options)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None,
                                  ) -> httpcore.AsyncNetworkStream:
        raise FetchProblem(FetchFailure.BLOCKED, "unix sockets are not fetched")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class OriginPools:
    """One small connection pool per origin (scheme, host, port), idle ones closed LRU.

    A single shared httpcore pool scans every connection for every queued request
    (quadratic: 40 s for 1,000 URLs at 200 in flight); pools of ``per_host`` connections
    keep each scan tiny. At most ``max_idle`` pools without a request in flight stay
    open, which bounds idle sockets by ``max_idle * per_host``.
    """

    def __init__(self, backend: httpcore.AsyncNetworkBackend, ssl_context: ssl.SSLContext,
                 per_host: int, max_idle: int) -> None:
        self._backend = backend
        self._ssl_context = ssl_context
        self._per_host = per_host
        self._max_idle = max_idle
        self._pools: OrderedDict[tuple[str, str, int], httpcore.AsyncConnectionPool] = (
            OrderedDict())
        self._busy: Counter[tuple[str, str, int]] = Counter()

    @asynccontextmanager
    async def use(self, check: UrlCheck) -> AsyncIterator[httpcore.AsyncConnectionPool]:
        key = (check.scheme, check.host, check.port)
        pool = self._pools.pop(key, None) or httpcore.AsyncConnectionPool(
            ssl_context=self._ssl_context, network_backend=self._backend,
            max_connections=self._per_host, keepalive_expiry=30.0)
        self._pools[key] = pool
        self._busy[key] += 1
        try:
            yield pool
        finally:
            self._busy[key] -= 1
            await self._evict()

    async def _evict(self) -> None:
        idle = [key for key in self._pools if not self._busy[key]]
        for key in idle[:max(0, len(idle) - self._max_idle)]:
            del self._busy[key]
            await self._pools.pop(key).aclose()

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), OrderedDict()
        for pool in pools:
            await pool.aclose()
