"""The admin routes: API keys (listed, created, revoked), the audit log, and the live
confidence card."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from medverify.service.error_codes import ErrorCode
from medverify.service.errors import ApiError
from medverify.service.records import KeyRequest, LiveCalibration
from medverify.service.routes.deps import Admin, State
from medverify.store.access import AuditEvent, KeyInfo, NewKey

router = APIRouter(tags=["admin"])

KeyId = Annotated[str, Path(max_length=64, description="the key's id (12 hex characters)")]


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
async def revoke_key(key_id: KeyId, request: Request, key: Admin, state: State) -> KeyInfo:
    """Revoke a key: its next request is 401 (revoking it again changes nothing).

    409 ``own_key`` for the key making the request (an admin cannot revoke itself: another
    admin key, or ``medverify keys revoke`` on the server, can); 409 ``last_admin`` for
    the last active admin key (it would lock every admin out of the API: create another
    admin key first)."""
    request.state.target = key_id
    if key_id == key.id:
        raise ApiError(409, ErrorCode.OWN_KEY, f"key {key_id} is the key making this "
                       "request: a key cannot revoke itself (use another admin key, or "
                       "`medverify keys revoke` on the server)")
    return state.keys.revoke(key_id, keep_an_admin=True)  # 404 KeyNotFound, 409 LastAdminKey


@router.get("/v1/audit-log", response_model=list[AuditEvent])
async def audit_log(key: Admin, state: State,
                    limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[AuditEvent]:
    """Who did what, newest first.

    Every write (key id, ``METHOD /path``, target, HTTP status), every refused key, and
    the ``medverify keys`` commands."""
    return state.audit.list(limit=limit)


@router.get("/v1/calibration", response_model=LiveCalibration)
async def calibration(key: Admin, state: State) -> LiveCalibration:
    """The confidence card the judge uses (none: the judge's own confidence, if any) and the
    audit event that applied it (``medverify calibrate --apply``)."""
    judge = state.checker.judge if state.checker is not None else None
    judge_id = str(getattr(judge, "judge_id", state.config.judge_name))
    card = getattr(judge, "card", None)
    if card is None:
        return LiveCalibration(judge=judge_id)
    applied = next((e for e in state.audit.list(limit=1000)
                    if e.action == "calibration.apply" and e.target == card.card_id), None)
    return LiveCalibration(judge=judge_id, card=card.summary(),
                           fits=getattr(judge, "mismatch", None) is None, applied=applied)
