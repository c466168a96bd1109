"""Observers of model calls: what the model facade (:class:`medverify.llm.facade.Model`)
tells about each call and each retry, to whoever listens.

The llm layer knows nothing of its listeners: the service's metrics
(:mod:`medverify.service.metrics`) install an observer here when a worker starts and remove
it when it stops. An observer is any object with ``call(event)`` and ``retry(model, stage)``;
what it raises is logged and swallowed, so watching a call can never fail it. Observers are
per process (each worker of ``medverify serve`` installs its own).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal, Protocol

log = logging.getLogger(__name__)

Outcome = Literal["ok", "cached", "error"]


@dataclass(frozen=True)
class CallEvent:
    """One finished call of :meth:`Model.complete <medverify.llm.facade.Model.complete>`."""

    model: str  # the provider id (endpoint + model), as runs record it
    stage: str  # the pipeline stage that asked (judge, decompose, ...)
    outcome: Outcome  # ok: the provider answered; cached: the request cache did; error: failed
    seconds: float  # wall time of the whole call, retries and their waits included
    prompt_tokens: int = 0  # of a real call (a cache hit costs none)
    completion_tokens: int = 0
    error: str | None = None  # of a failed call: the error's kind (ProviderError, BudgetSpent, ...)


class CallObserver(Protocol):
    """What the facade calls: once per finished call, once per retry."""

    def call(self, event: CallEvent) -> None: ...

    def retry(self, model: str, stage: str) -> None: ...


_observers: tuple[CallObserver, ...] = ()


def add_observer(observer: CallObserver) -> None:
    """Tell ``observer`` about every model call of this process from now on."""
    global _observers
    if observer not in _observers:
        _observers = (*_observers, observer)


def remove_observer(observer: CallObserver) -> None:
    """Stop telling ``observer`` (nothing happens when it was not added)."""
    global _observers
    _observers = tuple(o for o in _observers if o is not observer)


def observers() -> tuple[CallObserver, ...]:
    """The observers now installed."""
    return _observers


def notify_call(event: CallEvent) -> None:
    for observer in _observers:
        try:
            observer.call(event)
        except Exception:  # an observer's failure never fails the call
            log.exception("model call observer %r failed", observer)


def notify_retry(model: str, stage: str) -> None:
    for observer in _observers:
        try:
            observer.retry(model, stage)
        except Exception:
            log.exception("model call observer %r failed", observer)
