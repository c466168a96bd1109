"""Requests refused before any key was known, written to the audit log by the window
instead of one row each, so that traffic without a valid key cannot grow the store.

The rule, per client address: the first such refusal (no key or a wrong one: 401; the
per-address limit: 429; a write to an unknown path) writes one audit row at once (no key
id; its action and status; ``detail`` names the address). The refusals from that address
in the next :data:`WINDOW_S` seconds are only counted; when the window closes (at the next
refusal from anyone after it, or when the worker stops) one more row sums them up (action
``refused requests``, ``detail``: how many, from where, and of which kinds). So an address
adds at most two rows a minute however much it sends. Counts live in the worker process:
one killed outright loses those of its open windows (at most a minute's).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from medverify.store.access import AuditLog

WINDOW_S = 60.0
"""How long after an address's first refusal its further refusals are only counted."""

SUMMARY_ACTION = "refused requests"
"""The action of the row that sums up a window's counted refusals."""

_KINDS_SHOWN = 5


@dataclass
class _Window:
    opened: float  # the tally's clock
    opened_at: datetime
    counts: Counter[str] = field(default_factory=Counter)  # "ACTION -> STATUS": how many


class RefusalTally:
    """Refusals of requests without a valid key, by address and window (see the module)."""

    def __init__(self, audit: AuditLog, window_s: float = WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._audit, self.window_s, self._clock = audit, window_s, clock
        self._open: dict[str, _Window] = {}
        self._swept = clock()

    def refused(self, address: str, action: str, status: int) -> None:
        """Count one refused request from ``address`` (writing a row when it opens a
        window, and the summaries of the windows that have closed)."""
        now = self._clock()
        if now - self._swept >= 1.0:  # every window, at most once a second
            self._close(lambda window: now - window.opened >= self.window_s)
            self._swept = now
        window = self._open.get(address)
        if window is not None and now - window.opened >= self.window_s:
            self._close(lambda other: other is window)
            window = None
        if window is not None:
            window.counts[f"{action} -> {status}"] += 1
            return
        self._open[address] = _Window(now, datetime.now(UTC))
        self._audit.record(None, action, status=status, detail=(
            f"refused request from {address}; its further refusals in the next "
            f"{self.window_s:g} s are counted in one '{SUMMARY_ACTION}' row"))

    def flush(self) -> None:
        """Close every open window (the worker is stopping)."""
        self._close(lambda window: True)

    def _close(self, due: Callable[[_Window], bool]) -> None:
        for address in [a for a, w in self._open.items() if due(w)]:
            window = self._open.pop(address)
            total = sum(window.counts.values())
            if total == 0:
                continue
            kinds = ", ".join(f"{kind}: {n}" for kind, n in
                              window.counts.most_common(_KINDS_SHOWN))
            more = len(window.counts) - _KINDS_SHOWN
            self._audit.record(None, SUMMARY_ACTION, detail=(
                f"{total} more refused request(s) from {address} in the {self.window_s:g} s "
                f"after {window.opened_at.isoformat(timespec='seconds')} ({kinds}"
                + (f"; {more} other kind(s)" if more > 0 else "") + ")"))
