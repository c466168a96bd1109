"""Admission control for the synchronous checks: a bounded wait for the worker's check
slots and for room in its work, then a time limit on the work alone.

A check waits for a slot (``[service] max_concurrent_checks``) at most ``[service]
queue_wait_s``; past that it is refused with 503 ``overloaded`` and ``Retry-After`` before
any work starts, so nothing is recorded for it. Once admitted, its work gets ``[service]
request_timeout_s``: the clock starts at admission, so time spent queueing never cuts a
check off mid-work. Work that still passes the limit is cancelled (504 ``timeout``); the
run it started is recorded as ``interrupted``, with the reason.

**Long answers.** A check's size is its sentences (a proxy for its claims, known before
any work). The worker is treated as one server that gets through its checks' sentences at
a rate it learns while busy (seconds with at least one check running, over the sentences
of the checks that finished; first trusted when the worker has drained, so that no busy
time went to unfinished work, or taken from a probe the worker times alone at start): the
built-in judge runs on one thread per process, so checks queue for it rather than share
the cores. The budget is ``[service]
sync_work_share`` of the time limit. A check predicted past it even alone is refused at
once with 503 ``too_long`` (no ``Retry-After``: retrying will not help; submit it as a
job). Otherwise it is admitted only when, for it and for every check in work, the
sentences it may wait on (those in work when it was admitted, its own, and those of every
check admitted after it) still fit the budget at the learnt rate. A server that is busy
while a check runs works only on those sentences, in whatever order, so none is cut off
unless the rate was wrong. Checks are admitted in arrival order (a waiting long check is
not overtaken). Until the rate is known only the slots count.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from medverify.service.error_codes import ErrorCode
from medverify.service.errors import ApiError

T = TypeVar("T")

_SMOOTHING = 0.2
"""Weight of the newest duration in the running mean :class:`CheckSlots` keeps."""
_DECAY = 0.9
"""Weight the learnt rate keeps of the past at each finished check."""


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
    raise ApiError(504, ErrorCode.TIMEOUT, f"{reason}; submit long work as a job")


class Ticket:
    """One admitted check: its sentences and the work it may wait on, in sentences: those in
    work when it was admitted (its own too) and those of every check admitted after it."""

    __slots__ = ("units", "work")

    def __init__(self, units: int, work: int) -> None:
        self.units, self.work = units, work


class _Admission:
    """Checks admitted in arrival order while ``fits(self, units)`` says the next one fits;
    it keeps the admitted checks' tickets and the time with at least one running."""

    def __init__(self, fits: Callable[[_Admission, int], bool],
                 clock: Callable[[], float]) -> None:
        self.fits, self._clock = fits, clock
        self.tickets: list[Ticket] = []
        self.busy_s, self._since = 0.0, clock()
        self._queue: deque[tuple[int, asyncio.Future[Ticket]]] = deque()

    @property
    def running(self) -> int:
        return len(self.tickets)

    @property
    def units(self) -> int:
        return sum(t.units for t in self.tickets)

    def locked(self) -> bool:
        return bool(self._queue) or not self.fits(self, 1)

    async def acquire(self, units: int = 1) -> Ticket:
        ticket = await self.take(units, None)
        assert ticket is not None
        return ticket

    def release(self, ticket: Ticket) -> None:
        self._tick()
        self.tickets.remove(ticket)
        self.grant()

    def busy(self) -> float:
        """Seconds so far with at least one check running."""
        self._tick()
        return self.busy_s

    async def take(self, units: int, limit: float | None) -> Ticket | None:
        """Be admitted with ``units`` sentences within ``limit`` seconds (None: no limit);
        None, holding nothing, when that fails. An admission that arrives just as the wait
        is given up is released again, so a timed-out wait never keeps a slot."""
        if not self._queue and self.fits(self, units):
            return self._enter(units)
        granted: asyncio.Future[Ticket] = asyncio.get_running_loop().create_future()
        entry = (units, granted)
        self._queue.append(entry)
        try:
            await asyncio.wait({granted}, timeout=limit)
        except BaseException:  # the request itself was cancelled (the client left)
            self._give_up(entry)
            raise
        if granted.done():
            return granted.result()
        self._give_up(entry)
        return None

    def grant(self) -> None:
        """Admit the waiting checks, first come first served, while the first one fits."""
        while self._queue and self.fits(self, self._queue[0][0]):
            units, granted = self._queue.popleft()
            granted.set_result(self._enter(units))

    def _enter(self, units: int) -> Ticket:
        self._tick()
        for ticket in self.tickets:
            ticket.work += units
        ticket = Ticket(units, self.units + units)
        self.tickets.append(ticket)
        return ticket

    def _tick(self) -> None:
        now = self._clock()
        if self.tickets:
            self.busy_s += now - self._since
        self._since = now

    def _give_up(self, entry: tuple[int, asyncio.Future[Ticket]]) -> None:
        _, granted = entry
        if granted.done():  # admitted just as the wait was given up: give it back
            self.release(granted.result())
            return
        granted.cancel()
        self._queue.remove(entry)
        self.grant()  # a long check giving up may let the shorter ones behind it in


class CheckSlots:
    """Admission to one worker's checks: ``limit`` at once (None: no limit, no queue), in
    arrival order, each waiting up to ``queue_wait_s``, while the sentences in work fit in
    ``work_share`` of ``timeout_s`` at the learnt rate; each check's work may take
    ``timeout_s`` from its admission (see the module's docstring)."""

    def __init__(self, limit: int | None, queue_wait_s: float, timeout_s: float, *,
                 work_share: float = 0.8, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.queue_wait_s, self.timeout_s = limit, queue_wait_s, timeout_s
        self.work_share, self._clock = work_share, clock
        self.slots = _Admission(self._fits, clock) if limit is not None else None
        self.waiting = 0
        self.mean_s: float | None = None  # running mean of how long a check's work takes
        self.unit_s: float | None = None  # the learnt seconds of work per sentence
        self._learnt = (0.0, 0.0, 0.0)  # decayed (busy seconds, sentences), busy at last

    @property
    def budget_s(self) -> float:
        return self.work_share * self.timeout_s

    async def run(self, work: Callable[[], Awaitable[T]], units: int = 1) -> T:
        """``work()`` (of ``units`` sentences) once admitted, within ``timeout_s``; 503
        ``too_long`` at once when predicted too long even alone, 503 ``overloaded`` when
        not admitted within ``queue_wait_s`` (``work`` is then never called)."""
        if self.slots is None:
            return await within(self.timeout_s, work())
        units = max(1, units)
        self.refuse_too_long(units)
        ticket = await self._admit(self.slots, units)
        started = self._clock()
        try:
            return await within(self.timeout_s, work())
        finally:
            self.slots.release(ticket)
            self._observe(units, self._clock() - started)

    def refuse_too_long(self, units: int) -> None:
        """503 ``too_long`` when ``units`` sentences alone should pass the budget."""
        alone = None if self.unit_s is None else units * self.unit_s
        if alone is not None and alone > self.budget_s:
            raise ApiError(503, ErrorCode.TOO_LONG, f"this answer ({units} sentences) should "
                           f"take about {alone:.0f} s to check here, past {self.budget_s:.0f} s "
                           f"({self.work_share:g} of [service] request_timeout_s = "
                           f"{self.timeout_s:g} s): nothing was checked or recorded; submit "
                           "it as a job (POST /v1/jobs/check), which has no time limit")

    def _fits(self, admission: _Admission, units: int) -> bool:
        """A check fits when a slot is free and, at the learnt rate, it and every check
        in work would still finish within the budget if all the work in front of them and
        admitted after them ran first (the worker gets through its sentences at that rate
        while busy, in whatever order)."""
        if self.limit is not None and admission.running >= self.limit:
            return False
        if not admission.tickets or self.unit_s is None:
            return True
        most = self.budget_s / self.unit_s  # sentences of work a check may wait on
        return (admission.units + units <= most
                and all(t.work + units <= most for t in admission.tickets))

    async def _admit(self, slots: _Admission, units: int) -> Ticket:
        self.waiting += 1
        try:
            ticket = await slots.take(units, self.queue_wait_s)
            if ticket is None:
                retry = self.retry_after()
                raise ApiError(503, ErrorCode.OVERLOADED, "the worker had no room for this "
                               f"check within {self.queue_wait_s:g} s ([service] queue_wait_s; "
                               f"{self.limit} check slots); nothing was checked or recorded: "
                               f"retry after {retry} s, or submit the answers as a job (POST "
                               "/v1/jobs/check)", headers={"Retry-After": str(retry)})
            return ticket
        finally:
            self.waiting -= 1

    def retry_after(self) -> int:
        """Whole seconds until the checks queued now should be through (the queue length
        times the mean duration of a check, over the slots); at least 1."""
        if self.mean_s is None or not self.limit:
            return max(1, math.ceil(self.queue_wait_s))
        return max(1, math.ceil((self.waiting + 1) * self.mean_s / self.limit))

    def timed_alone(self, units: int, seconds: float) -> None:
        """Start from a check of ``units`` sentences timed alone (the worker's probe)."""
        assert self.slots is not None
        self._learnt = (seconds, float(units), self.slots.busy())
        self.unit_s = seconds / max(1, units)

    def _observe(self, units: int, seconds: float) -> None:
        """Learn from a finished check: its duration, and the worker's rate (the busy time
        since the last check finished, over this check's sentences, both decayed)."""
        self.mean_s = _smooth(self.mean_s, seconds)
        assert self.slots is not None
        busy = self.slots.busy()
        spent, done, last = self._learnt
        spent = _DECAY * spent + (busy - last)
        done = _DECAY * done + units
        self._learnt = (spent, done, busy)
        # busy time also went to the checks still in work: the rate is first trusted when
        # the worker has none left (every sentence it worked on is counted), then kept up
        if self.unit_s is not None or not self.slots.tickets:
            self.unit_s = spent / done
            self.slots.grant()  # the new rate may let a waiting check in


def _smooth(mean: float | None, value: float) -> float:
    return value if mean is None else (1 - _SMOOTHING) * mean + _SMOOTHING * value
