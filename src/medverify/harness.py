"""The run harness: what every flow does around its per-answer work.

The four flows (``check``, ``audit``, ``factcheck``, ``bench``; the HTTP service later)
share one way to

- open what a run needs (:class:`Resources`: the knowledge base and the model, closed again
  only when the run opened them itself); refusing input that cannot be checked and
  decomposing an answer is :mod:`medverify.decompose.answer`'s;
- record a run (:class:`RunHarness`): a run id, the run store's start and finish with one
  failure vocabulary (:class:`medverify.records.RunStatus`, :func:`status_for`), provenance
  (:class:`Provenance`, built from stages that declare ``name``, ``prompt_version`` and,
  for a judge, ``judge_id``), the token ledger, progress and cancellation
  (:class:`CancelToken`, checked before each answer starts).

A flow keeps only its per-answer work: ``harness.each(answers, work)`` runs it, at most
``concurrency`` answers at a time, in input order, and :meth:`RunHarness.recording` finishes
the run record however the block ends.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol, TypeVar

from medverify.config import Config
from medverify.errors import MedverifyError
from medverify.llm.facade import Model, UsageLedger, model_from_config
from medverify.records import RunStatus, Usage

if TYPE_CHECKING:
    from medverify.kb import KBStore
    from medverify.store.runs import RunStore

T = TypeVar("T")
A = TypeVar("A")

Progress = Callable[[int, int], None]
"""Called with (items done, items total)."""


# ----------------------------------------------------------------------- provenance


class Stage(Protocol):
    """What every stage declares so that a run can record what produced its results."""

    name: str
    prompt_version: str | None


def stage_id(stage: Stage) -> str:
    """What a run records for a stage: its ``judge_id`` (name + weights or model) when it
    declares one, else its name."""
    return str(getattr(stage, "judge_id", stage.name))


def prompt_versions(stages: Mapping[str, Stage | str | None]) -> dict[str, str]:
    """Stage name -> prompt id, for the stages that use a prompt (a stage object, or the
    prompt id itself)."""
    out = {}
    for name, stage in stages.items():
        version = stage if isinstance(stage, str) or stage is None else stage.prompt_version
        if version:
            out[name] = version
    return out


@dataclass(frozen=True)
class Provenance:
    """What a run records about how its results were made."""

    models: dict[str, str]
    prompt_versions: dict[str, str]
    kb_snapshot: str | None = None
    kb_lineage: str | None = None


# ----------------------------------------------------------------------- failure vocabulary


class RunCancelled(MedverifyError):
    """The run was cancelled through its :class:`CancelToken`."""


def status_for(exc: BaseException) -> RunStatus:
    """How a run that stopped with ``exc`` is recorded: cancelled, interrupted (Ctrl-C, a
    signal, task cancellation) or failed (an exception: its cause is recorded)."""
    if isinstance(exc, RunCancelled):
        return RunStatus.CANCELLED
    if isinstance(exc, Exception):
        return RunStatus.FAILED
    return RunStatus.INTERRUPTED


def cause(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class CancelToken:
    """Set from any thread (a service request, a signal handler) to stop a run: answers
    not yet started are not started, and the run is recorded as cancelled."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = "cancelled"

    def cancel(self, reason: str = "cancelled") -> None:
        self.reason = reason
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise RunCancelled(self.reason)


def new_run_id() -> str:
    """A run id: UTC time to the second and 6 random hex digits (sorts by start time)."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


# ----------------------------------------------------------------------- the harness


@dataclass
class RunHarness:
    """One run of a flow: its id, its record in the run store, its token ledger, progress
    and cancellation.

    ``store`` is a run store the caller opened; with ``record_to`` the harness opens the
    store there itself and closes it when the run ends. Without either nothing is recorded
    (and ``run_id`` is None unless ``always_id``). ``usage`` replaces the ledger's totals
    when a run's tokens are in several ledgers (a study's models under test)."""

    kind: str
    config: Config
    ledger: UsageLedger = field(default_factory=UsageLedger)
    store: RunStore | None = None
    usage: Callable[[], dict[str, Usage]] | None = None
    progress: Progress | None = None
    cancel: CancelToken | None = None
    always_id: bool = False
    # The config as the run store records it, when the caller holds it made already
    # (``Checker.public_config``); None: ``config.public()`` at the run's start.
    public_config: dict[str, object] | None = None
    run_id: str | None = None
    status: RunStatus = RunStatus.RUNNING
    error: str | None = None
    _owns_store: bool = field(default=False, repr=False)

    @classmethod
    def opening(cls, kind: str, config: Config, *, record: bool, **kwargs: object) -> RunHarness:
        """A harness that opens the configured run store itself when ``record``."""
        from medverify.store.runs import RunStore

        store = RunStore(config.store_location) if record else None
        return cls(kind, config, store=store, _owns_store=record, **kwargs)  # type: ignore[arg-type]

    def start(self, provenance: Provenance) -> str | None:
        """Record the run as running (when recording); returns its id."""
        if self.store is not None:
            self.run_id = self.store.start_run(
                kind=self.kind, config=self.public_config or self.config.public(),
                models=provenance.models,
                prompt_versions=provenance.prompt_versions, kb_snapshot=provenance.kb_snapshot,
                kb_lineage=provenance.kb_lineage)
        elif self.always_id:
            self.run_id = new_run_id()
        return self.run_id

    def finish(self, status: RunStatus, error: str | None = None) -> None:
        """Record how the run ended, with its token usage; closes a store it opened."""
        self.status, self.error = status, error
        try:
            if self.store is not None and self.run_id is not None:
                usage = self.usage() if self.usage is not None else self.ledger.as_dict()
                self.store.finish_run(self.run_id, status=status.value, usage=usage,
                                      error=error)
        finally:
            if self._owns_store and self.store is not None:
                self.store.close()

    def fail_items(self, failed: int, total: int, what: str) -> None:
        """Some answers produced no ``what``: the run ends as ``error`` (not ``done``)."""
        if failed:
            self.status = RunStatus.ERROR
            self.error = f"{failed} of {total} answers produced no {what}"

    @contextmanager
    def recording(self, provenance: Provenance) -> Iterator[RunHarness]:
        """Start the run; on leaving, finish it as ``done`` (or ``error`` after
        :meth:`fail_items`), or with :func:`status_for` the exception that ended it."""
        self.start(provenance)
        try:
            yield self
        except BaseException as exc:
            self.finish(status_for(exc), cause(exc))
            raise
        self.finish(RunStatus.ERROR if self.status is RunStatus.ERROR else RunStatus.DONE,
                    self.error)

    async def each(self, items: Sequence[A], work: Callable[[int, A], Awaitable[T]], *,
                   concurrency: int = 4, done: int = 0, total: int | None = None) -> list[T]:
        """``work(position, item)`` for every item, at most ``concurrency`` at a time;
        results in input order; progress after each; :class:`RunCancelled` once the
        cancel token is set (items already running finish first)."""
        return await run_each(items, work, concurrency=concurrency, progress=self.progress,
                              cancel=self.cancel, done=done, total=total)


async def run_each(items: Sequence[A], work: Callable[[int, A], Awaitable[T]], *,
                   concurrency: int = 4, progress: Progress | None = None,
                   cancel: CancelToken | None = None, done: int = 0,
                   total: int | None = None) -> list[T]:
    """``work(position, item)`` for every item, at most ``concurrency`` at a time; results
    in input order; ``progress(done, total)`` after each (counting from ``done``)."""
    limit = asyncio.Semaphore(concurrency)
    count = done
    whole = len(items) + done if total is None else total

    async def one(position: int, item: A) -> T:
        nonlocal count
        async with limit:
            if cancel is not None:
                cancel.check()
            result = await work(position, item)
        count += 1
        if progress:
            progress(count, whole)
        return result

    return await gather_all(one(i, a) for i, a in enumerate(items))


async def gather_all(jobs: Iterable[Awaitable[T]]) -> list[T]:
    """Run ``jobs`` concurrently, results in order; when one fails or the caller is
    cancelled, the others are cancelled too (finished work is already recorded)."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()


# ----------------------------------------------------------------------- resources and input


@dataclass
class Resources:
    """The knowledge base and model a run uses: the ones given, else opened from the
    config (the model only when one is configured). :meth:`aclose` closes only what was
    opened here."""

    kb: KBStore | None
    model: Model | None
    ledger: UsageLedger
    owned: tuple[object, ...] = ()

    @classmethod
    def open(cls, config: Config, *, kb: KBStore | None = None,
             model: Model | None = None, ledger: UsageLedger | None = None,
             need_kb: bool = True) -> Resources:
        """``ledger`` is used for a model opened here (a given model keeps its own)."""
        owned: list[object] = []
        if kb is None and need_kb:
            kb = open_kb(config)
            owned.append(kb)
        ledger = ledger if ledger is not None else UsageLedger()
        if model is not None:
            return cls(kb, model, model.usage, tuple(owned))
        if config.model:
            model = model_from_config(config, ledger=ledger)
            owned.append(model)
        return cls(kb, model, ledger, tuple(owned))

    async def aclose(self) -> None:
        await close_owned(self.owned)


def open_kb(config: Config) -> KBStore:
    """The configured knowledge base (the ``embedded`` store of :data:`medverify.kb.KB_STORES`
    unless a plugin's is named), or a ConfigError that says how to get one."""
    from medverify.kb import open_store

    return open_store(config)


async def close_owned(owned: Sequence[object]) -> None:
    """Close knowledge bases and models (anything with ``aclose`` or ``close``)."""
    for resource in owned:
        aclose = getattr(resource, "aclose", None)
        if aclose is not None:
            await aclose()
            continue
        close = getattr(resource, "close", None)
        if close is not None:
            close()
