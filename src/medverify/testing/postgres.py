"""A throwaway PostgreSQL server for tests and benchmarks (Debian's ``postgresql`` package).

:func:`start_cluster` runs ``initdb`` into a temporary folder and starts the server on a free
loopback port with its unix socket in that folder (trust authentication, user
``medverify``); :class:`PgCluster` stops, starts and removes it. As root, the server runs as
the ``postgres`` user (initdb refuses root).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

USER = "medverify"


def find_bin() -> Path | None:
    """The folder of initdb/pg_ctl: on PATH, else the newest /usr/lib/postgresql/*/bin."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                      else 0)
    return versions[-1].parent if versions else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PgCluster:
    """A running (or stopped) throwaway server."""

    bin_dir: Path
    root: Path  # data/, the socket and the log live here
    port: int
    run_as: str | None  # the user the server runs as (None: this one)
    durable: bool = False  # fsync on (a benchmark against SQLite); off for the tests

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{dbname}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.run_as is not None:
            command = ["runuser", "-u", self.run_as, "--", *command]
        return subprocess.run(command, check=check, capture_output=True, text=True,
                              timeout=120)

    def start(self) -> None:
        # not durable: the data survive the server's death, not the machine's; commits stay
        # synchronous either way, so a server stopped with "immediate" (a crash) keeps them
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} "
                   "-c max_connections=200")
        if not self.durable:
            options += " -c fsync=off -c full_page_writes=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"),
                  "-o", options, "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop",
                  check=False)

    def create_database(self) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def create_schema(self, dbname: str = "postgres") -> str:
        """A new empty schema in database ``dbname``; returns a URL whose connections use
        it (``search_path``): as isolated as a new database for the stores, and cheaper
        (no copy of the template database on disk)."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(dbname), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{self.url(dbname)}?options=-csearch_path%3D{name}"

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def start_cluster(*, durable: bool = False) -> PgCluster:
    """initdb into a new temporary folder and start the server (RuntimeError if it fails);
    ``durable``: with fsync (the server's defaults), else without (faster tests)."""
    bin_dir = find_bin()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL's initdb is not installed")
    run_as = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise RuntimeError("running as root and there is no postgres user to run the "
                               "server as (initdb refuses root)") from None
        run_as = "postgres"
    root = Path(tempfile.mkdtemp(prefix="medverify-pg-"))
    if run_as is not None:
        shutil.chown(root, user=run_as)
    cluster = PgCluster(bin_dir=bin_dir, root=root, port=_free_port(), run_as=run_as,
                        durable=durable)
    try:
        cluster._run("initdb", "-D", str(cluster.data), "-U", USER, "--auth=trust",
                     "-E", "UTF8", "--no-sync", "--no-instructions")
        cluster.start()
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"{exc.cmd[0]} failed: {exc.stderr.strip()[-400:]}") from None
    return cluster
