"""A real local HTTP server speaking the OpenAI chat-completions API, with scripted behaviour.

>>> with FakeChatServer("hello") as server:                  # fixed reply
...     model = get_model(f"openai-compatible:m@{server.base_url}")
>>> FakeChatServer(lambda body: body["messages"][-1]["content"].upper())   # reply function
>>> FakeChatServer("ok", script=[FakeResponse.error(429, retry_after=0.01)] * 2)  # 2 x 429
>>> FakeChatServer(FakeResponse.error(500))                  # always 500
>>> FakeChatServer("slow", delay_s=0.2)                      # 200 ms latency
>>> FakeChatServer(FakeResponse.malformed("<html>oops"))     # body is not JSON
>>> FakeChatServer(FakeResponse.truncated('{"label": "SUPP'))  # cut-off JSON content
>>> FakeChatServer(FakeResponse.huge(50_000_000))            # a 50 MB reply, streamed
>>> FakeChatServer(FakeResponse.stall())                     # accepts, never answers

Requests are served in parallel (one thread per connection), so latency and concurrency
limits can be measured; ``max_in_flight`` is the most requests seen at once. A huge reply is
generated piece by piece (the server never holds it), and ``streamed_bytes`` counts what a
client actually took of it; a stalled request is held until the server closes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, TypeAlias

from medverify.testing.local_server import LocalServer, QuietHandler


@dataclass(frozen=True)
class FakeResponse:
    """One scripted HTTP response. ``raw_body`` (when set) is sent verbatim."""

    text: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: str | None = None
    finish_reason: str = "stop"
    usage: bool = True
    delay_s: float = 0.0
    huge_bytes: int | None = None  # a reply text of this many bytes ("a"), sent piece by piece
    declare_length: bool = True  # of a huge reply: Content-Length, or chunked without one
    stalls: bool = False  # read the request, never answer (until the server closes)

    @classmethod
    def error(cls, status: int, *, retry_after: float | None = None,
              message: str = "scripted error") -> FakeResponse:
        headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
        body = json.dumps({"error": {"message": message, "code": status}})
        return cls(status=status, headers=headers, raw_body=body)

    @classmethod
    def malformed(cls, body: str = "<html>502 Bad Gateway</html>") -> FakeResponse:
        return cls(raw_body=body)

    @classmethod
    def truncated(cls, text: str) -> FakeResponse:
        return cls(text=text, finish_reason="length")

    @classmethod
    def huge(cls, size: int, *, declare_length: bool = True) -> FakeResponse:
        """A well-formed reply whose text is ``size`` bytes, streamed in 64 KiB pieces; with
        ``declare_length=False`` sent chunked, so the client learns its size only by reading."""
        return cls(huge_bytes=size, declare_length=declare_length)

    @classmethod
    def stall(cls) -> FakeResponse:
        """Take the request and never answer: a stalled endpoint."""
        return cls(stalls=True)

    def body(self, request: dict[str, Any]) -> bytes:
        if self.raw_body is not None:
            return self.raw_body.encode("utf-8")
        return json.dumps(self._chat_body(request)).encode("utf-8")

    def _chat_body(self, request: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": "chatcmpl-fake", "object": "chat.completion",
            "model": request.get("model", "fake"),
            "choices": [{"index": 0, "finish_reason": self.finish_reason,
                         "message": {"role": "assistant", "content": self.text}}],
        }
        if self.usage:
            prompt = sum(len(str(m.get("content", ""))) for m in request.get("messages", []))
            body["usage"] = {"prompt_tokens": max(prompt // 4, 1),
                             "completion_tokens": max(len(self.text) // 4, 1)}
        return body


Behaviour: TypeAlias = str | FakeResponse | Callable[[dict[str, Any]], "str | FakeResponse"]


@dataclass(frozen=True)
class ReceivedCall:
    """One request the server received."""

    path: str
    headers: dict[str, str]
    body: Any


class FakeChatServer(LocalServer):
    """OpenAI-compatible server on 127.0.0.1 (ephemeral port) for tests and benchmarks.

    ``reply``: the default behaviour (text, :class:`FakeResponse`, or a function of the
    request body). ``script``: responses used first, one per request, in order. ``delay_s``:
    latency added to every response. ``api_key``: when set, requests without
    ``Authorization: Bearer <api_key>`` get 401. ``reject_response_format``: answer 400 to
    requests that ask for ``response_format`` (servers without JSON mode).
    """

    thread_name = "fake-chat-server"

    def __init__(self, reply: Behaviour = "ok", *, script: Sequence[FakeResponse] = (),
                 delay_s: float = 0.0, api_key: str | None = None,
                 reject_response_format: bool = False) -> None:
        self.reply = reply
        self.delay_s = delay_s
        self.api_key = api_key
        self.reject_response_format = reject_response_format
        self.calls: list[ReceivedCall] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.streamed_bytes = 0  # of huge replies, what clients took before hanging up
        self._script = list(script)
        self._lock = threading.Lock()
        self._released = threading.Event()  # set on close: stalled requests end

    @property
    def requests(self) -> list[Any]:
        """Bodies of the requests received, in arrival order."""
        with self._lock:
            return [call.body for call in self.calls]

    @property
    def base_url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}/v1"


    def _respond(self, call: ReceivedCall) -> FakeResponse:
        with self._lock:
            self.calls.append(call)
            scripted = self._script.pop(0) if self._script else None
        if not isinstance(call.body, dict):
            return FakeResponse.error(400, message="request body is not a JSON object")
        if self.api_key is not None and call.headers.get("authorization") != \
                f"Bearer {self.api_key}":
            return FakeResponse.error(401, message="invalid api key")
        if self.reject_response_format and "response_format" in call.body:
            return FakeResponse.error(400, message="response_format is not supported")
        if scripted is not None:
            return scripted
        reply = self.reply(call.body) if callable(self.reply) else self.reply
        return reply if isinstance(reply, FakeResponse) else FakeResponse(text=reply)

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _streamed(self, size: int) -> None:
        with self._lock:
            self.streamed_bytes += size

    def close(self) -> None:
        self._released.set()
        super().close()


class _Handler(QuietHandler):
    def do_POST(self) -> None:
        fake = self.server.owner
        fake._enter()
        try:
            response, request = self._handle(fake)
        finally:
            # counted out before replying: a client that has its reply may send the next
            # request at once, and must not find this one still counted in flight
            fake._leave()
        self._send(response, request)

    def _handle(self, fake: FakeChatServer) -> tuple[FakeResponse, dict[str, Any]]:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            return FakeResponse.error(404, message=f"no route {self.path}"), {}
        call = ReceivedCall(self.path, {k.lower(): v for k, v in self.headers.items()},
                            _decode(raw))
        response = fake._respond(call)
        delay = fake.delay_s + response.delay_s
        if delay:
            time.sleep(delay)
        return response, call.body if isinstance(call.body, dict) else {}

    def _send(self, response: FakeResponse, request: dict[str, Any]) -> None:
        if response.stalls:
            self.server.owner._released.wait(timeout=600)
            self.close_connection = True
            return
        if response.huge_bytes is not None:
            _send_huge(self, response, request)
            return
        body = response.body(request)
        self.send_response(response.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)



_PIECE = 65536


def _send_huge(handler: QuietHandler, response: FakeResponse,
               request: dict[str, Any]) -> None:
    """A chat reply whose content is ``response.huge_bytes`` of "a", written piece by piece;
    what the client takes is counted in ``streamed_bytes``. A client that hangs up ends it."""
    size = response.huge_bytes or 0
    head, tail = json.dumps(FakeResponse(text="\0", usage=False)._chat_body(request)) \
        .encode().split(b"\\u0000")
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    if response.declare_length:
        handler.send_header("Content-Length", str(len(head) + size + len(tail)))
    else:
        handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    handler.close_connection = True
    for piece in chain((head,), _pieces(size), (tail,)):
        data = piece if response.declare_length else b"%x\r\n%s\r\n" % (len(piece), piece)
        handler.wfile.write(data)
        handler.server.owner._streamed(len(piece))
    if not response.declare_length:
        handler.wfile.write(b"0\r\n\r\n")


def _pieces(size: int) -> Iterator[bytes]:
    piece = b"a" * _PIECE
    for at in range(0, size, _PIECE):
        yield piece if size - at >= _PIECE else piece[: size - at]


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw.decode("utf-8", "replace")


# the handler class is defined after the server that serves it
FakeChatServer.handler = _Handler
