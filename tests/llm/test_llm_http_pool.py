"""The OpenAI-compatible provider's pool streams (medverify.llm.http_pool): installed in
the provider's client, and a connection the server closed while idle is still noticed."""

from __future__ import annotations

import asyncio
import json
import socket

import httpcore
import httpx

from medverify.llm.base import ChatRequest, Message
from medverify.llm.http_pool import SocketOnceBackend, socket_readable, use_socket_once
from medverify.llm.openai_compat import OpenAICompatProvider

_REPLY = json.dumps({"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
                     "model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 1}})


def test_socket_readable_follows_the_peer() -> None:
    ours, theirs = socket.socketpair()
    try:
        assert not socket_readable(ours)
        theirs.sendall(b"x")
        assert socket_readable(ours)
        ours.recv(1)
        assert not socket_readable(ours)
        theirs.close()  # end-of-file is readable
        assert socket_readable(ours)
    finally:
        ours.close()
    assert socket_readable(ours)  # closed: no file descriptor


def test_installed_in_a_default_client_only() -> None:
    async def check() -> None:
        client = httpx.AsyncClient()
        assert use_socket_once(client)
        pool = client._transport._pool  # type: ignore[attr-defined]
        assert isinstance(pool._network_backend, SocketOnceBackend)
        assert use_socket_once(client)  # a second call does not wrap it twice
        assert not isinstance(pool._network_backend.backend, SocketOnceBackend)
        await client.aclose()
        own = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200)))
        assert not use_socket_once(own)
        await own.aclose()

    asyncio.run(check())


async def _closing_server(connections: list[int]) -> asyncio.Server:
    """Answers one chat request per connection, keep-alive, then closes it."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        await reader.readexactly(length)
        body = _REPLY.encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Connection: keep-alive\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(body), body))
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_a_connection_closed_by_the_server_while_idle_is_not_reused() -> None:
    """The provider makes no retries: a reused dead connection would fail the second
    call. The pool sees the closed socket readable and opens a new connection."""

    async def run() -> list[str]:
        connections: list[int] = []
        server = await _closing_server(connections)
        port = server.sockets[0].getsockname()[1]
        provider = OpenAICompatProvider(kind="openai-compatible", model="m",
                                        base_url=f"http://127.0.0.1:{port}/v1")
        request = ChatRequest(model="m", messages=(Message(role="user", content="hi"),))
        texts = []
        try:
            for _ in range(3):
                texts.append((await provider.complete(request)).text)
                await asyncio.sleep(0.05)  # the server's close reaches the client
            pool = provider._get_client()._transport._pool  # type: ignore[attr-defined]
            assert isinstance(pool._network_backend, SocketOnceBackend)
        finally:
            await provider.aclose()
            server.close()
            await server.wait_closed()
        assert len(connections) == 3
        return texts

    assert asyncio.run(run()) == ["ok", "ok", "ok"]


def test_a_stream_without_a_socket_answers_for_itself() -> None:
    class NoSocket(httpcore.AsyncNetworkStream):
        def get_extra_info(self, info: str) -> object:
            return {"is_readable": "its own answer"}.get(info)

    from medverify.llm.http_pool import SocketOnceStream

    assert SocketOnceStream(NoSocket()).get_extra_info("is_readable") == "its own answer"


def test_the_parsed_url_follows_the_base_url() -> None:
    provider = OpenAICompatProvider(kind="openai-compatible", model="m",
                                    base_url="http://127.0.0.1:9/v1/")
    assert provider.url == "http://127.0.0.1:9/v1/chat/completions"
    assert provider._endpoint()[1] == httpx.URL(provider.url)
    provider.base_url = "http://localhost:8/x"
    assert provider._endpoint() == ("http://localhost:8/x/chat/completions",
                                    httpx.URL("http://localhost:8/x/chat/completions"))


class _Recorder(httpcore.AsyncNetworkStream):
    """An inner stream that records its writes (and can fail them)."""

    def __init__(self, fail: bool = False) -> None:
        self.writes: list[tuple[bytes, float | None]] = []
        self.closed = False
        self.fail = fail

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if self.fail:
            raise httpcore.WriteError("peer gone")
        self.writes.append((buffer, timeout))

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return b"HTTP/1.1 200 OK\r\n"

    async def aclose(self) -> None:
        self.closed = True


def test_a_request_is_sent_in_one_write_before_the_response_is_read() -> None:
    from medverify.llm.http_pool import SocketOnceStream

    async def run() -> None:
        inner = _Recorder()
        stream = SocketOnceStream(inner)
        await stream.write(b"POST / HTTP/1.1\r\n\r\n", timeout=5.0)
        await stream.write(b'{"a": 1}', timeout=6.0)
        await stream.write(b"", timeout=7.0)  # h11's end of message: nothing to send
        assert inner.writes == []  # held until the response is read
        assert await stream.read(100) == b"HTTP/1.1 200 OK\r\n"
        assert inner.writes == [(b'POST / HTTP/1.1\r\n\r\n{"a": 1}', 6.0)]
        await stream.read(100)  # nothing held: nothing written
        assert len(inner.writes) == 1
        await stream.write(b"x" * 10)
        await stream.aclose()  # closing sends what is held first
        assert inner.writes[-1] == (b"x" * 10, None) and inner.closed

    asyncio.run(run())


def test_large_bodies_are_sent_as_they_reach_the_hold_limit() -> None:
    from medverify.llm.http_pool import HOLD_BYTES, SocketOnceStream

    async def run() -> None:
        inner = _Recorder()
        stream = SocketOnceStream(inner)
        await stream.write(b"h" * 100)
        await stream.write(b"b" * HOLD_BYTES)
        assert [len(w) for w, _ in inner.writes] == [HOLD_BYTES + 100]
        await stream.write(b"t" * 5)
        await stream.read(10)
        assert [len(w) for w, _ in inner.writes] == [HOLD_BYTES + 100, 5]

    asyncio.run(run())


def test_a_failed_send_is_raised_by_the_read_and_a_close_still_closes() -> None:
    from medverify.llm.http_pool import SocketOnceStream

    async def run() -> None:
        stream = SocketOnceStream(_Recorder(fail=True))
        await stream.write(b"head")
        try:
            await stream.read(10)
        except httpcore.WriteError:
            pass
        else:
            raise AssertionError("the held write's failure was lost")
        inner = _Recorder(fail=True)
        stream = SocketOnceStream(inner)
        await stream.write(b"head")
        await stream.aclose()
        assert inner.closed

    asyncio.run(run())


def test_a_long_prompt_goes_through_the_real_pool() -> None:
    """A request body over the hold limit, through httpx and httpcore to a real server."""
    from medverify.llm.http_pool import HOLD_BYTES

    async def run() -> str:
        connections: list[int] = []
        server = await _closing_server(connections)
        port = server.sockets[0].getsockname()[1]
        provider = OpenAICompatProvider(kind="openai-compatible", model="m",
                                        base_url=f"http://127.0.0.1:{port}/v1")
        long = "word " * (HOLD_BYTES // 2)
        request = ChatRequest(model="m", messages=(Message(role="user", content=long),))
        try:
            return (await provider.complete(request)).text
        finally:
            await provider.aclose()
            server.close()
            await server.wait_closed()

    assert asyncio.run(run()) == "ok"
