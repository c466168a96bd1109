"""Admission control for the synchronous checks: a bounded wait for one of the worker's
check slots, then a time limit on the work alone.

A check waits for a slot (``[service] max_concurrent_checks``) at most ``[service]
queue_wait_s``; past that it is refused with 503 ``overloaded`` and ``Retry-After``
before any work starts, so nothing is recorded for it. Once it holds a slot, its work gets
``[service] request_timeout_s``: the clock starts when the slot is granted, so time spent
queueing never cuts a check off mid-work. Work that still passes the limit is cancelled
(504 ``timeout``); the run it started is recorded as ``interrupted``, with the reason.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from medverify.service.errors import ApiError

T = TypeVar("T")

_SMOOTHING = 0.2
"""Weight of the newest duration in the running mean :class:`CheckSlots` keeps."""


async def within(limit: float, work: Awaitable[T]) -> T:
    """``work``'s result, or 504 ``timeout`` once it has run ``limit`` seconds. The work is
    cancelled with the reason as the cancellation's message (a run it started records it:
    ``CancelledError: no result within ...``), and waited for before the 504."""
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=limit)
    except BaseException:  # the request itself was cancelled (the client left)
        task.cancel()
        raise
    if done:
        return task.result()
    reason = f"no result within {limit:g} s ([service] request_timeout_s)"
    task.cancel(reason)
    try:
        return await task  # it finished as it was being cancelled
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # the request itself was cancelled meanwhile
    raise ApiError(504, "timeout", f"{reason}; submit long work as a job")


async def _acquire_within(slots: asyncio.Semaphore, limit: float) -> bool:
    """Acquire ``slots`` within ``limit`` seconds; False (holding nothing) when that fails.
    A grant that arrives just as the wait is given up is released again, so a timed-out
    wait never keeps a slot (``asyncio.wait_for`` on Python 3.11 can lose one that way)."""
    acquire = asyncio.ensure_future(slots.acquire())
    done, _ = await asyncio.wait({acquire}, timeout=limit)
    if done:
        return True
    acquire.cancel()
    try:
        await acquire
    except asyncio.CancelledError:
        return False
    slots.release()  # granted while being cancelled: give it back
    return False


class CheckSlots:
    """The check slots of one worker: ``limit`` checks run at once (None: no limit), the
    others wait in arrival order up to ``queue_wait_s``; each check's work may take
    ``timeout_s`` from the moment its slot is granted."""

    def __init__(self, limit: int | None, queue_wait_s: float, timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.queue_wait_s, self.timeout_s = limit, queue_wait_s, timeout_s
        self.slots = asyncio.Semaphore(limit) if limit is not None else None
        self.waiting = 0
        self.mean_s: float | None = None  # running mean of how long a check's work takes
        self._clock = clock

    async def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """``work()`` in a slot, within ``timeout_s``; 503 ``overloaded`` when no slot is
        free within ``queue_wait_s`` (``work`` is then never called)."""
        if self.slots is None:
            return await within(self.timeout_s, work())
        await self._admit(self.slots)
        started = self._clock()
        try:
            return await within(self.timeout_s, work())
        finally:
            self.slots.release()
            self._observe(self._clock() - started)

    async def _admit(self, slots: asyncio.Semaphore) -> None:
        if not slots.locked():
            await slots.acquire()  # free (and nobody waiting): granted at once
            return
        self.waiting += 1
        try:
            if not await _acquire_within(slots, self.queue_wait_s):
                retry = self.retry_after()
                raise ApiError(503, "overloaded", f"all {self.limit} check slots stayed busy for "
                               f"{self.queue_wait_s:g} s ([service] queue_wait_s); nothing was "
                               f"checked or recorded: retry after {retry} s, or submit the "
                               "answers as a job (POST /v1/jobs/check)",
                               headers={"Retry-After": str(retry)})
        finally:
            self.waiting -= 1

    def retry_after(self) -> int:
        """Whole seconds until the checks queued now should be through (the queue length
        times the mean duration of a check, over the slots); at least 1."""
        if self.mean_s is None or not self.limit:
            return max(1, math.ceil(self.queue_wait_s))
        return max(1, math.ceil((self.waiting + 1) * self.mean_s / self.limit))

    def _observe(self, seconds: float) -> None:
        self.mean_s = seconds if self.mean_s is None else (
            (1 - _SMOOTHING) * self.mean_s + _SMOOTHING * seconds)
