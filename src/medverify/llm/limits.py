"""Limits on model calls: time budgets and the size of replies.

- **Time.** :class:`CallClock` bounds one call across its attempts and the waits between them
  (``[llm] call_budget_s``, counted from the first attempt) and, inside
  :func:`answer_budget`, all the calls made for one answer together (``[llm]
  answer_budget_s``; a context variable, so tasks started inside inherit it). Running out
  raises :class:`BudgetSpent`, a non-retryable :class:`ProviderError` naming the setting.
- **Size.** :func:`read_capped` reads an HTTP body up to ``[llm] max_reply_bytes`` and stops
  there (a ``Content-Length`` over the cap is refused before reading); :func:`check_reply_size`
  applies the same cap to the text of any provider; :func:`clip_stored` cuts model text kept
  in verdicts to ``[llm] max_stored_chars`` and marks the cut.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import httpx

from medverify.errors import ProviderError

CALL_SETTING = "[llm] call_budget_s"
ANSWER_SETTING = "[llm] answer_budget_s"
REPLY_SETTING = "[llm] max_reply_bytes"
STORED_SETTING = "[llm] max_stored_chars"


class BudgetSpent(ProviderError):
    """A call's or an answer's time budget ran out: not retried (the time is gone)."""


class ReplyTooLarge(ProviderError):
    """A reply over ``[llm] max_reply_bytes``: not retried (the same prompt would likely get
    another one), never cached."""


@dataclass(frozen=True)
class Deadline:
    """A moment on ``time.monotonic()``'s clock, and the budget it came from."""

    at: float
    budget_s: float
    what: str  # "call" or "answer"
    setting: str

    def left(self) -> float:
        return self.at - time.monotonic()

    def spent(self, detail: str) -> BudgetSpent:
        return BudgetSpent(f"the {self.what}'s time budget of {self.budget_s:g} s "
                           f"({self.setting}) ran out: {detail}")


_ANSWER: ContextVar[Deadline | None] = ContextVar("medverify_answer_deadline", default=None)


@contextmanager
def answer_budget(seconds: float) -> Iterator[None]:
    """Model calls made inside (also in tasks started inside) end ``seconds`` from now at the
    latest, as :class:`BudgetSpent`. 0: no limit. An enclosing earlier deadline stays."""
    outer = _ANSWER.get()
    if seconds <= 0:
        yield
        return
    mine = Deadline(time.monotonic() + seconds, seconds, "answer", ANSWER_SETTING)
    token = _ANSWER.set(mine if outer is None or mine.at < outer.at else outer)
    try:
        yield
    finally:
        _ANSWER.reset(token)


def answer_deadline() -> Deadline | None:
    """The deadline of the answer being checked in this context, if any."""
    return _ANSWER.get()


class CallClock:
    """The time left to one call: its own budget, started at its first attempt, and the
    answer's deadline when the call is made inside :func:`answer_budget`."""

    def __init__(self, call_budget_s: float, answer: Deadline | None = None) -> None:
        self._budget_s = call_budget_s
        self._answer = answer
        self._call: Deadline | None = None
        self.attempts = 0

    def start_attempt(self) -> None:
        """An attempt begins (a slot is held): the call's own budget runs from the first."""
        self.attempts += 1
        if self._call is None and self._budget_s > 0:
            self._call = Deadline(time.monotonic() + self._budget_s, self._budget_s, "call",
                                  CALL_SETTING)

    def binding(self) -> Deadline | None:
        """The deadline that ends first (None: no limit)."""
        deadlines = [d for d in (self._call, self._answer) if d is not None]
        return min(deadlines, key=lambda d: d.at) if deadlines else None

    def left(self) -> float | None:
        deadline = self.binding()
        return None if deadline is None else deadline.left()

    def attempt_timeout(self, timeout_s: float) -> tuple[float, Deadline | None]:
        """Seconds this attempt may take, and the deadline when it (not ``timeout_s``) is
        what limits it. Raises :class:`BudgetSpent` when nothing is left."""
        deadline = self.binding()
        if deadline is None:
            return timeout_s, None
        left = deadline.left()
        if left <= 0:
            raise deadline.spent(f"nothing left for attempt {self.attempts}")
        return (left, deadline) if left < timeout_s else (timeout_s, None)

    def check_wait(self, delay_s: float, last: ProviderError) -> None:
        """Raise :class:`BudgetSpent` when waiting ``delay_s`` before the next attempt would
        leave no time for it."""
        deadline = self.binding()
        if deadline is not None and deadline.left() <= delay_s:
            raise deadline.spent(f"no time for another attempt after {self.attempts} "
                                 f"(next in {delay_s:.2g} s); last error: {last}")


def _too_large(url: str, cap: int, detail: str) -> ReplyTooLarge:
    return ReplyTooLarge(f"{url}: reply larger than {cap:,} bytes ({REPLY_SETTING}): {detail}")


async def read_capped(response: httpx.Response, cap: int, url: str, *,
                      truncate: bool = False) -> bytes:
    """The body of a streamed ``response``, at most ``cap`` bytes (decoded content, so a
    compressed bomb counts in full). Past the cap: :class:`ReplyTooLarge`, having read no
    further, or with ``truncate`` the first ``cap`` bytes (error replies: a snippet is all
    that is wanted). A ``Content-Length`` over the cap is refused before reading."""
    declared = response.headers.get("content-length", "")
    if not truncate and declared.isdigit() and int(declared) > cap:
        raise _too_large(url, cap, f"Content-Length {int(declared):,}, not read")
    body = bytearray()
    async for chunk in response.aiter_bytes():
        room = cap - len(body)
        if len(chunk) > room:
            if truncate:
                body += chunk[:room]
                break
            raise _too_large(url, cap, f"stopped reading after {len(body) + len(chunk):,} bytes")
        body += chunk
    return bytes(body)


def check_reply_size(text: str, cap: int, provider_id: str) -> None:
    """Raise :class:`ReplyTooLarge` when ``text`` is over ``cap`` bytes in UTF-8."""
    if len(text) <= cap // 4:  # four bytes per character at most: no need to count
        return
    size = len(text) if len(text) > cap else len(text.encode("utf-8", "surrogatepass"))
    if size > cap:
        raise ReplyTooLarge(f"{provider_id}: reply larger than {cap:,} bytes "
                            f"({REPLY_SETTING}): {size:,}{'+' if len(text) > cap else ''}")


def clip_stored(text: str | None, limit: int) -> str | None:
    """``text`` cut to ``limit`` characters, the cut marked, for keeping in a verdict."""
    if text is None or len(text) <= limit:
        return text
    return (f"{text[:limit]} [truncated by medverify: {len(text) - limit:,} more characters "
            f"not kept ({STORED_SETTING} = {limit:,})]")
