"""The HTTP service started for real on a loopback port, for tests and benchmarks.

:class:`ServiceProcess` runs ``medverify serve`` in a subprocess (what a user runs: it can
be sent SIGTERM or SIGKILL); :class:`ServiceThread` runs the app under uvicorn in a thread
of this process, so fakes registered here (``fake:`` models) serve its judge.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

import httpx

from medverify.config import Config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], bool], timeout_s: float, poll_s: float = 0.01) -> bool:
    """Poll ``condition`` until it holds or ``timeout_s`` passes; its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(poll_s)
    return condition()


def wait_healthy(url: str, timeout_s: float = 120.0, *, ready: bool = True,
                 process: subprocess.Popen[bytes] | None = None) -> None:
    """Until ``/healthz`` (and ``/readyz`` when ``ready``) answer 200."""
    deadline = time.monotonic() + timeout_s
    paths = ["/healthz", "/readyz"] if ready else ["/healthz"]
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            if all(httpx.get(url + p, timeout=2.0).status_code == 200 for p in paths):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not healthy after {timeout_s:g} s")


class ServiceProcess:
    """``medverify serve --kb KB --store STORE`` on a free loopback port, in a subprocess
    with ``MEDVERIFY_HOME=home`` (its request cache and fetch cache)."""

    def __init__(self, *, kb: Path, store: Path | str, home: Path, workers: int = 1,
                 args: Sequence[str] = (), env: dict[str, str] | None = None,
                 log: Path | None = None) -> None:
        self.kb, self.store, self.home, self.workers = kb, store, home, workers
        self.args, self.env, self.log = list(args), env or {}, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 120.0) -> ServiceProcess:
        command = [sys.executable, "-m", "medverify", "serve", "--kb", str(self.kb),
                   "--store", str(self.store), "--port", str(self.port),
                   "--workers", str(self.workers), *self.args]
        env = {**os.environ, "MEDVERIFY_HOME": str(self.home), **self.env}
        if self.log is not None:
            with open(self.log, "ab") as out:  # the child keeps its own copy of the handle
                self.process = subprocess.Popen(command, env=env, stdout=out, stderr=out,
                                                start_new_session=True)
        else:
            self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True)
        wait_healthy(self.url, timeout_s, process=self.process)
        return self

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (a graceful shutdown) and wait; returns the exit code."""
        return self._signal(signal.SIGTERM, timeout_s)

    def kill(self) -> int:
        """SIGKILL the whole process group (the server and its workers)."""
        return self._signal(signal.SIGKILL, 30.0)

    def _signal(self, sig: signal.Signals, timeout_s: float) -> int:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        os.killpg(self.process.pid, sig)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait(30.0)

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.kill()


class ServiceThread:
    """The app of ``config`` under uvicorn in a daemon thread, on a free loopback port."""

    def __init__(self, config: Config) -> None:
        import uvicorn

        from medverify.service.app import create_app

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(
            create_app(config), host="127.0.0.1", port=self.port, log_level="warning",
            lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServiceThread:
        self.thread.start()
        wait_healthy(self.url, 120.0)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(60.0)
