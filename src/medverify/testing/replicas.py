"""Two ``medverify serve`` replicas on one PostgreSQL behind Debian's nginx, for the
deployment test and benchmark of several replicas (docs/scale.md, "Several replicas").

:func:`nginx_config` writes the load balancer's configuration (the one docs/scale.md
shows; ``examples/nginx/medverify.conf`` is the same for a real deployment): round robin
over the replicas, a passive health check (``max_fails``/``fail_timeout``), and
``proxy_next_upstream error timeout`` so that a request that could not be *sent* to a dead
replica goes to the other one, while a request already sent (a POST in flight on a replica
that dies) is never sent twice. Each request is logged with the replica that answered
it, its status and its start and end (:func:`read_access_log`), so the 5xx a client saw can
be matched with the replica and the moment it was killed. :class:`Nginx` runs it in the
foreground with its own prefix (no system service); :class:`Replica` is one ``medverify
serve`` on a fixed port, killed and started again on that port.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from medverify.testing.service import ServiceProcess, free_port, wait_healthy

LOG_FORMAT = "$msec|$request_time|$status|$request_method|$uri|$upstream_addr|$upstream_status"
"""One access-log line: end time (epoch s), seconds taken, the client's status, method,
path, the replica(s) tried and their statuses (", " between them when nginx tried two)."""


def find_nginx() -> str | None:
    """nginx on PATH, else Debian's /usr/sbin/nginx (None: not installed)."""
    found = shutil.which("nginx")
    if found:
        return found
    return "/usr/sbin/nginx" if Path("/usr/sbin/nginx").is_file() else None


def nginx_config(prefix: Path, port: int, replicas: Sequence[str], *, fail_timeout_s: int = 5,
                 read_timeout_s: int = 120) -> str:
    """The configuration: nginx on ``127.0.0.1:port`` balancing ``replicas``
    (``host:port``), its logs, pid and temporary files under ``prefix``."""
    servers = "\n".join(f"        server {r} max_fails=1 fail_timeout={fail_timeout_s}s;"
                        for r in replicas)
    temp = "\n".join(f"    {kind}_temp_path {prefix}/tmp/{kind};"
                     for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return f"""worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    log_format replicas '{LOG_FORMAT}';
    access_log {prefix}/access.log replicas;
{temp}
    upstream medverify {{
{servers}
    }}
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 2m;
        location / {{
            proxy_pass http://medverify;
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_connect_timeout 2s;
            proxy_read_timeout {read_timeout_s}s;
            # a request not sent (connection refused, reset before sending) goes to the
            # other replica; a POST already sent is never retried (no non_idempotent)
            proxy_next_upstream error timeout;
            proxy_next_upstream_tries 2;
        }}
    }}
}}
"""


class Nginx:
    """nginx in the foreground (``daemon off``) with its own configuration and prefix."""

    def __init__(self, prefix: Path, replicas: Sequence[str], binary: str | None = None) -> None:
        self.prefix, self.replicas = prefix, list(replicas)
        found = binary or find_nginx()
        if found is None:
            raise RuntimeError("nginx is not installed (Debian: apt-get install nginx)")
        self.binary = found
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def access_log(self) -> Path:
        return self.prefix / "access.log"

    def start(self, timeout_s: float = 20.0) -> Nginx:
        (self.prefix / "tmp").mkdir(parents=True, exist_ok=True)
        conf = self.prefix / "nginx.conf"
        conf.write_text(nginx_config(self.prefix, self.port, self.replicas))
        with open(self.prefix / "stderr.log", "ab") as out:
            self.process = subprocess.Popen(
                [self.binary, "-c", str(conf), "-p", str(self.prefix), "-g", "daemon off;"],
                stdout=out, stderr=out, start_new_session=True)
        wait_healthy(self.url, timeout_s, ready=False, process=self.process)
        return self

    def stop(self) -> None:
        """SIGQUIT (finish the requests in flight), then SIGKILL after 10 s."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGQUIT)
        try:
            self.process.wait(10.0)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10.0)

    def __enter__(self) -> Nginx:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class Logged:
    """One request as nginx logged it."""

    start: float  # epoch seconds
    end: float
    status: int
    method: str
    path: str
    upstreams: tuple[str, ...]  # the replicas tried, in order
    upstream_statuses: tuple[str, ...]


def read_access_log(path: Path) -> list[Logged]:
    """Every request of nginx's access log (:data:`LOG_FORMAT`)."""
    found = []
    for line in path.read_text().splitlines():
        parts = line.split("|")
        if len(parts) != 7:
            continue
        end, took, status, method, uri, upstreams, statuses = parts
        found.append(Logged(float(end) - float(took), float(end), int(status), method, uri,
                            _listed(upstreams), _listed(statuses)))
    return found


def _listed(field: str) -> tuple[str, ...]:
    """nginx's list of upstream values (", " between tries, " : " between groups)."""
    return tuple(v.strip() for v in field.replace(" : ", ",").split(",")
                 if v.strip() and v.strip() != "-")


class Replica:
    """One ``medverify serve`` on a fixed loopback port, with the KB and the run store at
    ``location`` (PostgreSQL); :meth:`kill`, then :meth:`start` again on the same port."""

    def __init__(self, name: str, location: str, work: Path, env: dict[str, str],
                 args: Sequence[str] = ()) -> None:
        home = work / f"home-{name}"
        home.mkdir(parents=True, exist_ok=True)
        env = {**env, "MEDVERIFY_KB_SETTINGS__LOCATION": location}
        # --kb is required by the command line; [kb_settings] location is the KB
        self.server = ServiceProcess(kb=home, store=location, home=home, env=env,
                                     log=work / f"serve-{name}.log", args=args)
        self.name = name
        self.url = self.server.url
        self.address = f"127.0.0.1:{self.server.port}"
        self.starts: list[float] = []

    def start(self, timeout_s: float = 120.0) -> Replica:
        began = time.perf_counter()
        self.server.start(timeout_s)
        self.starts.append(time.perf_counter() - began)
        return self

    def kill(self) -> float:
        """SIGKILL the replica (its process group); returns the epoch time of the kill."""
        at = time.time()
        self.server.kill()
        return at

    def readyz(self) -> dict[str, Any]:
        return httpx.get(self.url + "/readyz", timeout=10.0).json()  # type: ignore[no-any-return]
