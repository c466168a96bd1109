"""``/healthz`` and ``/readyz``: whether the process is up and can take work (no key)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from medverify.records import package_version
from medverify.service.records import Health, Readiness
from medverify.service.routes.deps import State

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is up (no key needed)."""
    return Health(version=package_version())


@router.get("/readyz", response_model=Readiness, responses={
    503: {"model": Readiness, "description": "not ready: what is missing"}})
async def readyz(state: State) -> JSONResponse:
    """The KB is open and the models are loaded (503 with what is missing otherwise), and
    the KB generation this replica serves (``kb_generation``, ``kb_replica_generation``)."""
    checks = state.readiness()
    ready = all(v == "ok" for v in checks.values())
    generations = await asyncio.to_thread(state.kb_generations)
    body = Readiness(ready=ready, checks=checks, **generations).model_dump(mode="json")
    return JSONResponse(body, status_code=200 if ready else 503)
