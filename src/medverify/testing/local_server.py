"""What the local test servers share: a threaded HTTP server on 127.0.0.1 (a free port),
served from a daemon thread, started and stopped as a context manager."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar, Self


class OwnedServer(ThreadingHTTPServer):
    """A threaded HTTP server whose handlers reach their :class:`LocalServer` as ``owner``."""

    daemon_threads = True
    request_queue_size = 256
    owner: Any

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client that hung up (e.g. after its timeout) is not a server error
        super().handle_error(request, client_address)


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive, headers and body sent at once, no request log."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once, no 40 ms ACK stall
    server: OwnedServer
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        return  # keep test output quiet


class LocalServer:
    """Base of the local servers: subclasses set ``handler`` (its ``self.server.owner`` is
    the LocalServer) and ``thread_name``."""

    handler: ClassVar[type[BaseHTTPRequestHandler]]
    thread_name: ClassVar[str] = "local-server"

    _httpd: OwnedServer | None = None
    _thread: threading.Thread | None = None
    port: int = 0
    """The port to listen on; 0 (default) picks a free one."""

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) of the running server."""
        if self._httpd is None:
            raise RuntimeError(f"{type(self).__name__} is not running; "
                               "use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    def start(self) -> Self:
        httpd = OwnedServer(("127.0.0.1", self.port), self.handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name=self.thread_name,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


CompletionsReply = Callable[[dict[str, Any]], tuple[int, Any]]


class CompletionsServer(LocalServer):
    """A fake OpenAI-style completions endpoint: ``POST /v1/completions`` answered by
    ``reply(body) -> (status, JSON body)`` (vLLM- or llama.cpp-shaped, as the test scripts
    it); the bodies and headers it received are kept."""

    thread_name = "fake-completions-server"

    def __init__(self, reply: CompletionsReply) -> None:
        self.reply = reply
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []

    @property
    def base_url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}/v1"


class _CompletionsHandler(QuietHandler):
    def do_POST(self) -> None:
        owner: CompletionsServer = self.server.owner
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        owner.bodies.append(body)
        owner.headers.append({k.lower(): v for k, v in self.headers.items()})
        status, payload = ((404, {"error": "no route"}) if self.path != "/v1/completions"
                           else owner.reply(body))
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


CompletionsServer.handler = _CompletionsHandler
