"""The ``runs`` table of the run store: one row per run (its kind, status, config, models,
prompt versions, KB snapshot and lineage, usage, the process and the service request that
ran it), written when a run starts and finishes and read back as :class:`RunInfo`; and the
hourly outcome counts of check runs (:mod:`medverify.store.outcomes`).

:class:`RunTable` is a mixin of :class:`medverify.store.runs.RunStore` (its connection).
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from medverify.connections import Database
from medverify.errors import MedverifyError
from medverify.records import Usage, package_version
from medverify.store.context import current_request_id
from medverify.store.outcomes import OutcomeCount, count_outcomes
from medverify.store.sql_bounds import sql_bound


class RunInfo(BaseModel):
    """One row of ``medverify runs list``."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: str
    status: str
    created_at: str
    finished_at: str | None
    medverify_version: str
    config: dict[str, Any]
    models: dict[str, str]
    prompt_versions: dict[str, str]
    kb_snapshot: str | None
    usage: dict[str, Usage]
    error: str | None
    n_answers: int = 0
    n_claims: int = 0
    process: str | None = None  # "host:pid" that ran it (runs recorded since version 7)
    process_gone: bool = False  # running, but its process on this host is gone (killed)
    kb_lineage: str | None = None  # the KB's identity across ingests (since version 11)
    request_id: str | None = None  # the service request it was made for (since version 12)


_RUN_COLUMNS = ("r.id, r.kind, r.status, r.created_at, r.finished_at, r.medverify_version, "
                "r.config, r.models, r.prompt_versions, r.kb_snapshot, r.usage, r.error, "
                "r.process, r.kb_lineage, r.request_id")


def current_process() -> str:
    """This process as a run records it: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def process_gone(process: str | None) -> bool:
    """Whether ``host:pid`` names a process of this host that no longer exists (a process
    of another host cannot be checked: False)."""
    host, _, pid = (process or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class RunTable:
    """The runs table's writers and readers (a mixin: ``_db`` is the store's)."""

    _db: Database
    _readable: Any  # () -> a context in which a damaged record is a MedverifyError

    def start_run(
        self,
        *,
        kind: str,
        config: dict[str, Any],
        models: dict[str, str],
        prompt_versions: dict[str, str],
        kb_snapshot: str | None,
        kb_lineage: str | None = None,
    ) -> str:
        run_id = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        self._db.execute(
            "INSERT INTO runs (id, kind, status, created_at, medverify_version, config, models,"
            " prompt_versions, kb_snapshot, process, kb_lineage, request_id) VALUES (?, ?,"
            " 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                kind,
                _now(),
                package_version(),
                json.dumps(config),
                json.dumps(models),
                json.dumps(prompt_versions),
                kb_snapshot,
                current_process(),
                kb_lineage,
                current_request_id(),
            ),
        )
        return run_id

    def interrupt_orphans(self) -> int:
        """Record the running runs whose process on this host is gone (killed) as
        interrupted; returns how many. The service calls it when it takes over the jobs of
        a dead worker."""
        rows = self._db.execute(
            "SELECT id, process FROM runs WHERE status = 'running' AND process IS NOT NULL"
        ).fetchall()
        gone = [(run_id, process) for run_id, process in rows if process_gone(process)]
        for run_id, process in gone:
            self._db.execute(
                "UPDATE runs SET status = 'interrupted', finished_at = ?, error = ? "
                "WHERE id = ? AND status = 'running'",
                (_now(), f"its process ({process}) stopped while running it (killed?)", run_id))
        return len(gone)

    def finish_run(
        self, run_id: str, *, status: str, usage: dict[str, Usage], error: str | None = None
    ) -> None:
        self._db.execute(
            "UPDATE runs SET status = ?, finished_at = ?, usage = ?, error = ? WHERE id = ?",
            (
                status,
                _now(),
                json.dumps({k: v.model_dump() for k, v in usage.items()}),
                error,
                run_id,
            ),
        )

    def list_runs(self, limit: int = 50) -> list[RunInfo]:
        with self._readable():
            return self._select_runs("", (), limit=limit)

    def outcomes(self, since: datetime, until: datetime) -> list[OutcomeCount]:
        """The claims of check runs started in ``[since, until)``, counted by hour and
        outcome (:mod:`medverify.store.outcomes`: the drift report's input)."""
        with self._readable():
            return count_outcomes(self._db, since, until)

    def get_run(self, run_id: str) -> RunInfo:
        """The run whose id starts with ``run_id`` (a unique prefix is enough)."""
        prefix = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where = ("WHERE r.id LIKE ? ESCAPE '\\'", (prefix + "%",))
        with self._readable():
            matches = self._select_runs(*where, limit=2)
        if len(matches) != 1:
            sql = f"SELECT COUNT(*) FROM runs r {where[0]}"
            count = self._db.execute(sql, where[1]).fetchone()[0]
            problem = "no run" if not matches else f"{count} runs"
            raise MedverifyError(f"{problem} matching {run_id!r}; see `medverify runs list`")
        return matches[0]

    def _select_runs(self, where: str, params: tuple[Any, ...], *, limit: int) -> list[RunInfo]:
        rows = self._db.execute(
            f"SELECT {_RUN_COLUMNS}, (SELECT COUNT(*) FROM answers a WHERE a.run_id = r.id)"
            " + (SELECT COUNT(*) FROM audits u WHERE u.run_id = r.id)"
            " + (SELECT COUNT(*) FROM bench_replies b WHERE b.run_id = r.id)"
            " + (SELECT COUNT(*) FROM factchecks f WHERE f.run_id = r.id),"
            " (SELECT COUNT(*) FROM claims c WHERE c.run_id = r.id)"
            " + (SELECT COALESCE(SUM(n_claims), 0) FROM audits u WHERE u.run_id = r.id)"
            " + (SELECT COALESCE(SUM(n_facts), 0) FROM factchecks f WHERE f.run_id = r.id)"
            f" FROM runs r {where} ORDER BY created_at DESC, id DESC LIMIT ?",
            (*params, sql_bound(limit)),
        ).fetchall()
        return [self._info(row) for row in rows]

    @staticmethod
    def _info(row: tuple[Any, ...]) -> RunInfo:
        (run_id, kind, status, created, finished, version, config, models, prompts, snapshot,
         usage, error, process, lineage, request, n_answers, n_claims) = row
        return RunInfo(
            id=run_id,
            kind=kind,
            status=status,
            created_at=created,
            finished_at=finished,
            medverify_version=version,
            config=json.loads(config),
            models=json.loads(models),
            prompt_versions=json.loads(prompts),
            kb_snapshot=snapshot,
            usage={k: Usage.model_validate(v) for k, v in json.loads(usage).items()},
            error=error,
            n_answers=n_answers,
            n_claims=n_claims,
            process=process,
            process_gone=status == "running" and process_gone(process),
            kb_lineage=lineage,
            request_id=request,
        )
