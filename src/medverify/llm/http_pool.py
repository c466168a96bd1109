"""The OpenAI-compatible provider's connection pool, made cheaper to keep: network streams
that look their socket up once and send each request in one write.

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
HOLD_BYTES = 64 * 1024  # held writes are sent once they reach this (a long prompt's body)


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
    looked up once, and sends a request's writes together; everything else is the wrapped
    stream's.

    httpcore writes a request's head and its body apart, two sends (two system calls, and
    on loopback two wake-ups of the server) for every LLM call. Writes here are held until
    the stream is next read (the response), closed or upgraded to TLS, or until
    :data:`HOLD_BYTES` are held, and then sent as one, under the last write's timeout. A
    failed send is raised by the call that sends it (httpcore's ``WriteError`` either way)."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: object = _UNKNOWN
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._write_timeout: float | None = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        await self._flush()
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        self._held.append(buffer)
        self._held_bytes += len(buffer)
        self._write_timeout = timeout
        if self._held_bytes >= HOLD_BYTES:
            await self._flush()

    async def _flush(self) -> None:
        """Send what the writes held, as one write."""
        if not self._held:
            return
        data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held, self._held_bytes = [], 0
        await self._inner.write(data, self._write_timeout)

    async def aclose(self) -> None:
        try:
            await self._flush()
        except (httpcore.WriteError, httpcore.WriteTimeout, OSError):
            pass  # closing anyway: what was held goes unsent, as on a closed connection
        finally:
            await self._inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        await self._flush()
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
