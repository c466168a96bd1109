"""The writer lock of a KB directory: one writer at a time; readers never wait for it.

Every write to a KB (creating it, an ingest, a removal, a reindex, building or dropping
the lexical postings) holds ``kb.lock`` in the KB directory with ``flock(LOCK_EX)`` from
start to end. A second writer waits for it (saying so once: ``another ingest is writing
this KB (pid N); waiting up to 60 s ...``) up to its ``wait`` seconds, then refuses with
:class:`KBBusyError` (a :class:`~medverify.errors.KBError`: CLI exit 2). The kernel
releases the lock when its holder exits, however it exits, so a killed writer (``kill
-9``) never leaves a stale lock: the next writer takes it at once (and resumes what the
killed one left, as an ingest does). The file itself stays (removing a lock file races
with a process that has just opened it); it holds the holder's pid and what it is
doing, written once the lock is taken, for the waiting writer's message.

Readers (search, ``check``, ``kb stats``) take no lock: SQLite's WAL lets them read while
a batch is committed, and the vector index follows the generation it was saved at. A
reader that had to rebuild the vector index saves it only when it can take the lock
without waiting (:class:`GuardedVectorIndex`), so it never writes ``vectors.faiss`` under
a running ingest.

``flock``, not ``fcntl.lockf``: POSIX record locks belong to a process, so two
:class:`~medverify.kb.store.KnowledgeBase` objects of one process (threads of the service)
would not exclude each other, and closing any descriptor of the file would drop them.
``flock`` locks belong to an open file, so every :class:`WriterLock` excludes every other.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from medverify.errors import KBError
from medverify.kb.index import VectorIndex
from medverify.text import printable

LOCK_NAME = "kb.lock"
WRITER_WAIT_S = 60.0  # how long a second writer waits for the first (kb ingest --wait)
POLL_S = 0.05  # how often a waiting writer tries again
log = logging.getLogger(__name__)


class KBBusyError(KBError):
    """Another process held the KB's writer lock for longer than this writer would wait.
    The KB is not damaged: run the command again once the other writer has finished."""


class WriterLock:
    """``flock`` on ``DIRECTORY/kb.lock`` for one write (``activity``: ``ingest``,
    ``removal``, ...); ``wait`` seconds at most for another holder (None: no limit),
    telling ``on_wait`` (default: a logged warning) once when it has to wait."""

    def __init__(self, directory: Path, activity: str = "ingest",
                 wait: float | None = WRITER_WAIT_S,
                 on_wait: Callable[[str], None] | None = None) -> None:
        self.path = Path(directory) / LOCK_NAME
        self.activity = activity
        self.wait = wait
        self.on_wait = on_wait or (lambda message: log.warning("%s", message))
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder(self) -> tuple[int | None, str]:
        """(pid, activity) the current holder wrote into the file, (None, "writer") when it
        has written nothing yet."""
        try:
            pid, _, activity = self.path.read_text("utf-8").strip().partition(" ")
            return int(pid), activity or "writer"
        except (OSError, ValueError):
            return None, "writer"

    def describe_holder(self) -> str:
        pid, activity = self.holder()
        return f"another {activity} is writing this KB (pid {pid if pid else 'unknown'})"

    def try_acquire(self) -> bool:
        """Take the lock if no one holds it; False at once otherwise (or when the lock file
        cannot be opened: a read-only KB directory)."""
        try:
            fd = self._open()
        except OSError:
            return False
        try:
            if self._take(fd):
                return True
        except OSError:  # (no locks on this file system: treated as held)
            pass
        os.close(fd)
        return False

    def acquire(self) -> None:
        """Take the lock, waiting up to ``wait`` seconds; :class:`KBBusyError` when another
        writer still holds it then, KBError when the lock file cannot be created."""
        try:
            fd = self._open()
        except OSError as exc:
            raise KBError(f"cannot write the knowledge base at {self.path.parent}: its lock "
                          f"file cannot be opened ({exc})") from None
        try:
            taken = self._take(fd)
        except OSError as exc:
            os.close(fd)
            raise KBError(f"cannot lock the knowledge base at {self.path.parent} for "
                          f"writing ({exc})") from None
        if not taken:
            self._wait_for(fd)

    def _wait_for(self, fd: int) -> None:
        """Try again every POLL_S seconds until the lock is taken or ``wait`` is over."""
        started = time.monotonic()
        if self.wait is None or self.wait > 0:
            limit = "as long as it takes" if self.wait is None else f"up to {self.wait:g} s"
            self.on_wait(f"{self.describe_holder()}; waiting {limit} for it to finish "
                         f"({printable(str(self.path.parent))})")
        try:
            while self.wait is None or time.monotonic() - started < self.wait:
                time.sleep(POLL_S)
                if self._take(fd):
                    log.info("the other writer of %s finished after %.1f s: going on",
                             self.path.parent, time.monotonic() - started)
                    return
            busy = self.describe_holder()
            if self._take(fd):  # (it finished while its pid was read: the lock is free)
                return
        finally:
            if self._fd is None:
                os.close(fd)
        raise KBBusyError(
            f"{busy}, at {printable(str(self.path.parent))}; gave up after {self.wait:g} s "
            "(the KB is not damaged): run this again when it has finished, or wait longer "
            "(medverify kb ingest --wait SECONDS)")

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except PermissionError:  # a lock file we may not write: flock works read-only too
            return os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)

    def _take(self, fd: int) -> bool:
        """Lock ``fd`` if no one else holds the lock (False: someone does; ``fd`` stays
        open for the caller to try again or close)."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self._fd = fd
        with contextlib.suppress(OSError):  # (a read-only lock file: no pid to show)
            line = f"{os.getpid()} {self.activity}\n".encode()
            os.pwrite(fd, line, 0)  # (then cut: a waiter never reads an empty file)
            os.ftruncate(fd, len(line))
        return True

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> WriterLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


class GuardedVectorIndex(VectorIndex):
    """A :class:`~medverify.kb.index.VectorIndex` that saves an index it had to rebuild
    (a reader finding the saved one stale) only under the KB's writer lock: when this
    KB holds it (``writer_held()``), or when it can be taken without waiting and the KB
    has not changed since the rebuild read its vectors. Otherwise the rebuilt index is
    used from memory, and the writer saves its own."""

    def __init__(self, *args: Any, writer_held: Callable[[], bool], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writer_held = writer_held
        self._built_at: int | None = None

    def _build(self, *args: Any, **kwargs: Any) -> Any:
        self._built_at = self._generation()
        return super()._build(*args, **kwargs)

    def _try_save(self) -> None:
        if self.writer_held():
            super()._try_save()
            return
        lock = WriterLock(self.path, "vector index save", wait=0)
        if not lock.try_acquire():
            log.info("%s: a writer holds the KB; the rebuilt vector index is used from "
                     "memory, not saved", self.path)
            return
        try:
            if self._generation() == self._built_at:
                super()._try_save()
        finally:
            lock.release()
