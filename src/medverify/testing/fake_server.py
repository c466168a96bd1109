"""A real local HTTP server speaking the OpenAI chat-completions API, with scripted behaviour.

>>> with FakeChatServer("hello") as server:                  # fixed reply
...     model = get_model(f"openai-compatible:m@{server.base_url}")
>>> FakeChatServer(lambda body: body["messages"][-1]["content"].upper())   # reply function
>>> FakeChatServer("ok", script=[FakeResponse.error(429, retry_after=0.01)] * 2)  # 2 x 429
>>> FakeChatServer(FakeResponse.error(500))                  # always 500
>>> FakeChatServer("slow", delay_s=0.2)                      # 200 ms latency
>>> FakeChatServer(FakeResponse.malformed("<html>oops"))     # body is not JSON
>>> FakeChatServer(FakeResponse.truncated('{"label": "SUPP'))  # cut-off JSON content

Requests are served in parallel (one thread per connection), so latency and concurrency
limits can be measured; ``max_in_flight`` is the most requests seen at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
        self._script = list(script)
        self._lock = threading.Lock()

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
        body = response.body(request)
        self.send_response(response.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)



def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw.decode("utf-8", "replace")


# the handler class is defined after the server that serves it
FakeChatServer.handler = _Handler
