"""The request a piece of work is done for, as the run store records it.

The service sets :data:`request_id` for each HTTP request (and for each job, to the id of the
request that submitted it); :meth:`RunStore.start_run <medverify.store.runs.RunStore.start_run>`
and :meth:`JobStore.submit <medverify.store.jobs.JobStore.submit>` record it, and the
service's log lines carry it. A context variable: asyncio tasks and threads started inside a
request (``asyncio.to_thread``) inherit it, so every run of that request gets the same id.
The command line never sets it (its runs record NULL).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

request_id: ContextVar[str | None] = ContextVar("medverify_request_id", default=None)
"""The id of the request being served (None outside one)."""


def current_request_id() -> str | None:
    return request_id.get()


@contextmanager
def serving(value: str | None) -> Iterator[None]:
    """Work done inside the block is done for request ``value``."""
    token = request_id.set(value)
    try:
        yield
    finally:
        request_id.reset(token)
