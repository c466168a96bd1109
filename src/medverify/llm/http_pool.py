"""The OpenAI-compatible provider's connection pool, made cheaper to keep: network streams
that look their socket up once.

httpcore's pool asks every pooled connection, each time it places a request and each time a
response is closed, whether the server has closed it (an idle keep-alive connection whose
socket is readable is about to read end-of-file). httpcore's AnyIO stream answers by asking
AnyIO for the raw socket, which builds the table of all the stream's typed attributes (a
``getpeername`` system call among them) on every question. With ``[llm] concurrency``
connections in the pool that was a fifth of the HTTP client's CPU per LLM call in
``benchmarks/bench_service_cpu.py``. :class:`SocketOnceBackend` wraps the pool's own backend;
its streams fetch the socket the first time they are asked and then ask the same question
of it (``poll`` without waiting). Every other call goes to the wrapped stream unchanged.

:func:`use_socket_once` installs the backend in an ``httpx.AsyncClient``'s default pool (a
pool for a proxy from the environment keeps httpx's own); it returns False, changing
nothing, where httpx's pool is not the shape it expects.
"""

from __future__ import annotations

import select
import socket
import ssl
import typing

import httpcore
import httpx

_UNKNOWN = object()


def socket_readable(sock: socket.socket) -> bool:
    """Whether reading ``sock`` would return at once (data or end-of-file); a closed socket
    (no file descriptor) counts as readable, as httpcore counts it."""
    fd = sock.fileno()
    if fd < 0:
        return True
    if not hasattr(select, "poll"):  # pragma: no cover - Windows
        return bool(select.select([fd], [], [], 0)[0])
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class SocketOnceStream(httpcore.AsyncNetworkStream):
    """A network stream that answers ``get_extra_info("is_readable")`` from its socket,
    looked up once; everything else is the wrapped stream's."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: object = _UNKNOWN

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        return SocketOnceStream(
            await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> typing.Any:
        if info != "is_readable":
            return self._inner.get_extra_info(info)
        if self._socket is _UNKNOWN:
            found = self._inner.get_extra_info("socket")
            if found is None:  # a stream that shows no socket: its own answer
                return self._inner.get_extra_info(info)
            self._socket = found
        return socket_readable(typing.cast(socket.socket, self._socket))


class SocketOnceBackend(httpcore.AsyncNetworkBackend):
    """``backend``'s connections, as :class:`SocketOnceStream` streams."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self.backend = backend

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: typing.Iterable[typing.Any] | None = None
                          ) -> httpcore.AsyncNetworkStream:
        return SocketOnceStream(await self.backend.connect_tcp(
            host, port, timeout=timeout, local_address=local_address,
            socket_options=socket_options))

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: typing.Iterable[typing.Any] | None = None
                                  ) -> httpcore.AsyncNetworkStream:
        return SocketOnceStream(await self.backend.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options))

    async def sleep(self, seconds: float) -> None:
        await self.backend.sleep(seconds)


def use_socket_once(client: httpx.AsyncClient) -> bool:
    """Put :class:`SocketOnceBackend` under ``client``'s default connection pool; False
    (nothing changed) where that pool is not an ``httpcore.AsyncConnectionPool`` holding a
    ``_network_backend`` (another httpx, a transport of the caller's)."""
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    if type(pool) is not httpcore.AsyncConnectionPool:
        return False
    backend = getattr(pool, "_network_backend", None)
    if not isinstance(backend, httpcore.AsyncNetworkBackend):
        return False
    if not isinstance(backend, SocketOnceBackend):
        pool._network_backend = SocketOnceBackend(backend)
    return True
