"""``GET /metrics``: the service's Prometheus metrics (docs/operations.md)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import Response

from medverify.service.routes.deps import Admin, State

router = APIRouter(tags=["operations"])


@router.get("/metrics", response_class=Response, responses={200: {
    "content": {"text/plain": {}}, "description": "the metrics in the Prometheus text format"}})
async def metrics(key: Admin, state: State) -> Response:
    """The service's metrics in the Prometheus text format.

    Requests, refusals, checked claims by category, decision and confidence, model calls,
    jobs, the review queue, the KB and the drift gauges; what each means is in
    docs/operations.md. Several workers: every worker's counts, summed. 404 ``not_found``
    when ``[service] metrics_port`` serves them on a port of their own; 409
    ``not_configured`` with ``[service] metrics = false``."""
    body, content_type = await asyncio.to_thread(state.need_metrics().exposition)
    return Response(body, media_type=content_type)
