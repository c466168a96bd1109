"""The admin routes: API keys (listed, created, revoked) and the audit log."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from medverify.service.errors import ApiError
from medverify.service.records import KeyRequest
from medverify.service.routes.deps import Admin, State
from medverify.store.access import AuditEvent, KeyInfo, KeyNotFound, NewKey

router = APIRouter(tags=["admin"])


@router.get("/v1/keys", response_model=list[KeyInfo])
async def keys(key: Admin, state: State) -> list[KeyInfo]:
    """Every API key (never a secret)."""
    return state.keys.list()


@router.post("/v1/keys", response_model=NewKey, status_code=201)
async def create_key(body: KeyRequest, request: Request, key: Admin, state: State) -> NewKey:
    """A new key; its secret is in this response only."""
    made = state.keys.create(body.name, body.role)
    request.state.target = made.key.id
    return made


@router.post("/v1/keys/{key_id}/revoke", response_model=KeyInfo)
async def revoke_key(key_id: str, request: Request, key: Admin, state: State) -> KeyInfo:
    """Revoke a key: its next request is 401 (revoking it again changes nothing)."""
    request.state.target = key_id
    try:
        return state.keys.revoke(key_id)
    except KeyNotFound:
        raise ApiError(404, "not_found", f"no key {key_id!r}") from None


@router.get("/v1/audit-log", response_model=list[AuditEvent])
async def audit_log(key: Admin, state: State,
                    limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[AuditEvent]:
    """Who did what, newest first.

    Every write (key id, ``METHOD /path``, target, HTTP status), every refused key, and
    the ``medverify keys`` commands."""
    return state.audit.list(limit=limit)
