"""What the routes ask FastAPI for: the worker's :class:`ServiceState` and the calling key,
checked for a role (:func:`medverify.service.auth.role`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from medverify.service.auth import role
from medverify.service.state import ServiceState
from medverify.store.access import KeyInfo, Role


async def service_state(request: Request) -> ServiceState:
    """The state this worker's lifespan opened (``app.state.service``); async, so it runs
    on the event loop, as the routes do."""
    return request.app.state.service  # type: ignore[no-any-return]


State = Annotated[ServiceState, Depends(service_state)]
Client = Annotated[KeyInfo, Depends(role(Role.CLIENT))]
Reviewer = Annotated[KeyInfo, Depends(role(Role.REVIEWER))]
Admin = Annotated[KeyInfo, Depends(role(Role.ADMIN))]
