"""``GET /v1/runs/{run_id}`` and its HTML report: recorded runs read back from the store
(no model call), for the keys whose requests or jobs made them. The report page carries a
strict Content-Security-Policy (:func:`report_headers`): the report is self-contained, so
nothing outside it loads, and only its own script runs."""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
import re
from functools import lru_cache
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from medverify.audit.store import audits as stored_audits
from medverify.errors import MedverifyError
from medverify.factcheck.store import factchecks as stored_factchecks
from medverify.report.html import render_html
from medverify.service.error_codes import ErrorCode
from medverify.service.errors import ApiError
from medverify.service.records import RunRecord
from medverify.service.routes.deps import Client, State
from medverify.service.state import ServiceState
from medverify.store.access import KeyInfo, Role

router = APIRouter(tags=["runs"])


@router.get("/v1/runs/{run_id}", response_model=RunRecord)
async def run(run_id: str, key: Client, state: State) -> RunRecord:
    """A recorded run and what it produced (read from the store, no model call).

    The runs of this key's checks and jobs (an admin key: any run); 404 otherwise."""
    info = _run_info(state, key, run_id)
    out = RunRecord(info=info.model_dump(mode="json"))
    if info.kind == "check":
        out.reports = state.runs.reports(info.id)
    elif info.kind == "audit":
        out.audits = stored_audits(state.runs, info.id)
    elif info.kind == "factcheck":
        out.factchecks = stored_factchecks(state.runs, info.id)
    return out


@router.get("/v1/runs/{run_id}/report", response_class=HTMLResponse)
async def run_report(run_id: str, key: Client, state: State,
                     answer: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0) -> HTMLResponse:
    """The HTML report of one answer of a check run.

    ``answer`` counts from 0. 404 for audit and fact-check runs (their data is at ``GET
    /v1/runs/{run_id}``)."""
    info = _run_info(state, key, run_id)
    if info.kind != "check":
        raise ApiError(404, ErrorCode.NOT_FOUND, f"run {info.id} is a {info.kind} run: its "
                       "HTML report is written by the command (GET /v1/runs/{id} has its "
                       "data)")
    reports = state.runs.reports(info.id)
    if answer >= len(reports):
        raise ApiError(404, ErrorCode.NOT_FOUND, f"run {info.id} has {len(reports)} answers")
    return HTMLResponse(render_html(reports[answer]), headers=report_headers())


REPORT_TEMPLATE = "report.html.j2"
_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)


@lru_cache(maxsize=1)
def report_headers() -> dict[str, str]:
    """The headers of an HTML report: a CSP that loads nothing from outside the page
    (inline styles, ``data:`` images), runs only the report template's own inline scripts
    (by their SHA-256, so a script that escaped into the page would not run), and allows
    no forms, frames or base URL; plus ``nosniff``, no framing, no referrer, no caching."""
    template = importlib.resources.files("medverify.report") / "templates" / REPORT_TEMPLATE
    scripts = _SCRIPT.findall(template.read_text(encoding="utf-8"))
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'"
                      for s in scripts) or "'none'"
    return {"Content-Security-Policy": (
                "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
                f"script-src {hashes}; form-action 'none'; frame-ancestors 'none'; "
                "base-uri 'none'"),
            "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
            "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


def _run_info(state: ServiceState, key: KeyInfo, run_id: str) -> Any:
    """The run, when this key may see it: an admin key any; another key the runs of its
    own requests and jobs."""
    try:
        info = state.runs.get_run(run_id)
    except MedverifyError:
        info = None
    if info is not None and (key.role is Role.ADMIN or state.audit.touched(key.id, info.id)
                             or state.jobs.has_run(key.id, info.id)):
        return info
    raise ApiError(404, ErrorCode.NOT_FOUND, f"no run {run_id!r} for this key")
