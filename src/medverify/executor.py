"""Where the heavy stages run: in this process, or as tasks on a Ray cluster.

An :class:`Executor` maps a picklable function over chunks of items and gives the results
back in input order, calling ``progress(n)`` as each chunk of ``n`` items completes. The
function takes one chunk (a list) and returns one result per item.

Three ways to use one:

* ``map(fn, items)``: every result, in input order (``eval pairs``).
* ``imap(fn, items)``: ``(chunk index, results)`` as chunks complete, each chunk once (in
  order locally, in completion order on Ray, at most twice the CPUs out), for stages
  that write each chunk's results as they come so that a rerun resumes after them
  (audits, risk features).
* ``submit(fn, chunk)``: one chunk, as a :class:`concurrent.futures.Future`, for stages
  that feed work as they read it and keep ``slots`` chunks in flight (ingest).

* :class:`LocalExecutor` runs the chunks one after another in this process.
* :class:`RayExecutor` runs each chunk as a Ray task (``pip install 'medverify[ray]'``). A
  task whose worker dies is run again (``max_retries``); results are kept by chunk index,
  so a chunk that comes back twice is counted once.

:func:`executor_from_spec` reads the CLI's ``--executor`` value: ``local``, ``ray`` (a
local Ray, or the cluster named by ``RAY_ADDRESS``) or ``ray:ADDRESS`` (``ray:HOST:6379``,
``ray:auto``).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar, runtime_checkable

from medverify.errors import ConfigError, MissingDependencyError

T = TypeVar("T")
R = TypeVar("R")

Progress = Callable[[int], None]
"""Called with the number of items of each chunk as it completes."""

DEFAULT_CHUNK = 256


def chunked(items: Sequence[T], size: int) -> list[list[T]]:
    """``items`` cut into lists of ``size`` (the last may be shorter)."""
    if size < 1:
        raise ValueError(f"chunk size must be positive, not {size}")
    return [list(items[start:start + size]) for start in range(0, len(items), size)]


def _checked(index: int, chunk: Sequence[Any], results: Sequence[R]) -> Sequence[R]:
    """``results`` as ``fn`` returned them, once they are one per item of ``chunk``."""
    if len(results) != len(chunk):
        raise RuntimeError(f"chunk {index}: {len(chunk)} items gave {len(results)} results")
    return results


@runtime_checkable
class Executor(Protocol):
    """Runs ``fn`` over chunks of ``items``; results in input order."""

    name: str

    @property
    def slots(self) -> int:
        """How many chunks are worth keeping in flight at once."""
        ...

    def map(self, fn: Callable[[list[T]], Sequence[R]], items: Sequence[T], *,
            chunk_size: int = DEFAULT_CHUNK, progress: Progress | None = None) -> list[R]: ...

    def imap(self, fn: Callable[[list[T]], Sequence[R]], items: Sequence[T], *,
             chunk_size: int = DEFAULT_CHUNK,
             progress: Progress | None = None) -> Iterator[tuple[int, list[R]]]: ...

    def submit(self, fn: Callable[[list[T]], Sequence[R]],
               chunk: list[T]) -> Future[Sequence[R]]: ...

    def close(self) -> None: ...


class LocalExecutor:
    """Every chunk in this process, in order (the behaviour without ``--executor``)."""

    name = "local"
    slots = 1

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    def map(self, fn: Callable[[list[T]], Sequence[R]], items: Sequence[T], *,
            chunk_size: int = DEFAULT_CHUNK, progress: Progress | None = None) -> list[R]:
        out: list[R] = []
        for _, results in self.imap(fn, items, chunk_size=chunk_size, progress=progress):
            out += results
        return out

    def imap(self, fn: Callable[[list[T]], Sequence[R]], items: Sequence[T], *,
             chunk_size: int = DEFAULT_CHUNK,
             progress: Progress | None = None) -> Iterator[tuple[int, list[R]]]:
        for index, chunk in enumerate(chunked(items, chunk_size)):
            results = list(_checked(index, chunk, fn(chunk)))
            if progress is not None:
                progress(len(chunk))
            yield index, results

    def submit(self, fn: Callable[[list[T]], Sequence[R]],
               chunk: list[T]) -> Future[Sequence[R]]:
        """The chunk on one background thread (torch and I/O release the GIL, so the
        caller goes on reading meanwhile); chunks submitted run one after another."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="medverify-local")
        return self._pool.submit(lambda: _checked(0, chunk, fn(chunk)))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _run_chunk(fn: Callable[[list[Any]], Sequence[Any]], index: int,
               chunk: list[Any]) -> tuple[int, Sequence[Any], float]:
    """The Ray task: one chunk, tagged with its index (and the seconds it took)."""
    started = time.perf_counter()
    return index, fn(chunk), time.perf_counter() - started


def _import_ray() -> Any:
    try:
        import ray  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise MissingDependencyError("ray", "ray", needed_for="--executor ray") from exc
    return ray


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Raise a :class:`ConfigError` naming ``address`` (``HOST:PORT``, optionally
    ``ray://HOST:PORT``) when nothing listens there: Ray itself would retry for a minute
    or more before failing. Addresses without a port (``auto``) are left to Ray."""
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not host or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise ConfigError(
            f"no Ray cluster answers at {address} ({exc}): start one there with "
            "`ray start --head --port PORT`, or check the host and port of --executor ray:ADDRESS"
        ) from exc


class RayExecutor:
    """Each chunk a Ray task. ``address``: a running cluster (``HOST:6379``, ``auto``), or
    None for a local Ray started here with ``num_cpus`` CPUs (or the cluster named by
    ``RAY_ADDRESS``). Ray is imported and connected on first use."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None,
                 max_retries: int = 3) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self.max_retries = max_retries
        self._started = False
        self._ray: Any = None
        self._remote: Any = None

    def _connect(self) -> Any:
        if self._ray is not None:
            return self._ray
        ray = _import_ray()
        if self.address is not None:
            check_reachable(self.address)
        if ray.is_initialized():
            self._check_joined(ray)
        else:
            options: dict[str, Any] = {"include_dashboard": False, "ignore_reinit_error": True,
                                       "log_to_driver": False}
            if self.address is not None:
                options["address"] = self.address
            else:  # CPUs can only be set for a Ray started here, not for a cluster joined
                options["num_cpus"] = self.num_cpus
            try:
                ray.init(**options)
            except Exception as exc:
                where = f"the Ray cluster at {self.address}" if self.address else "a local Ray"
                raise ConfigError(
                    f"cannot connect to {where} ({type(exc).__name__}: {exc}); start it with "
                    "`ray start --head` and pass --executor ray:HOST:6379"
                ) from exc
            self._started = True
        self._ray = ray
        return ray

    def _check_joined(self, ray: Any) -> None:
        """Ray is already running in this process (one connection a process): use it only
        when it is the cluster asked for (or none in particular was)."""
        if self.address is None or self.address == "auto":
            return
        current = str(ray.get_runtime_context().gcs_address or "")
        wanted = self.address.split("://", 1)[-1]
        if current != wanted:
            raise ConfigError(
                f"this process is already connected to the Ray cluster at "
                f"{current or 'a local Ray'}, not {self.address}: Ray allows one cluster a "
                "process")

    @property
    def slots(self) -> int:
        """The cluster's CPUs (one task per CPU)."""
        ray = self._connect()
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def map(self, fn: Callable[[list[T]], Sequence[R]], items: Sequence[T], *,
            chunk_size: int = DEFAULT_CHUNK, progress: Progress | None = None) -> list[R]:
        results = dict(self.imap(fn, items, chunk_size=chunk_size, progress=progress))
        return [result for index in range(len(results)) for result in results[index]]

    def imap(self, fn: Callable[[list[T]], Sequence[R]], items: Sequence[T], *,
             chunk_size: int = DEFAULT_CHUNK,
             progress: Progress | None = None) -> Iterator[tuple[int, list[R]]]:
        """Chunks submitted as workers free up, at most twice the cluster's CPUs out at once
        (so results waiting for the caller, and chunks waiting for a worker, stay bounded);
        yielded as each completes (each index once)."""
        chunks = chunked(items, chunk_size)
        if not chunks:
            return
        ray = self._connect()
        task = self._task(ray)
        fn_ref = ray.put(fn)
        window = max(2, 2 * self.slots)
        pending: list[Any] = []
        queued = iter(enumerate(chunks))

        def submit_more() -> None:
            while len(pending) < window:
                nxt = next(queued, None)
                if nxt is None:
                    return
                pending.append(task.remote(fn_ref, *nxt))

        seen: set[int] = set()
        try:
            submit_more()
            while pending:
                done, rest = ray.wait(pending, num_returns=1)
                pending[:] = rest
                for ref in done:
                    index, out, _seconds = ray.get(ref)
                    if index in seen:  # the same chunk twice: count it once
                        continue
                    seen.add(index)
                    results = list(_checked(index, chunks[index], out))
                    if progress is not None:
                        progress(len(chunks[index]))
                    yield index, results
                submit_more()
        finally:
            for ref in pending:  # the caller stopped early (an error, a break)
                ray.cancel(ref)

    def submit(self, fn: Callable[[list[T]], Sequence[R]],
               chunk: list[T]) -> Future[Sequence[R]]:
        """One chunk as a Ray task (retried if its worker dies)."""
        ray = self._connect()
        ref = self._task(ray).remote(fn, 0, chunk)
        out: Future[Sequence[R]] = Future()

        def settle(done: Future[Any]) -> None:
            try:
                _, results, _seconds = done.result()
                out.set_result(_checked(0, chunk, results))
            except BaseException as exc:  # the task's error, or Ray's
                out.set_exception(exc)

        ref.future().add_done_callback(settle)
        return out

    def _task(self, ray: Any) -> Any:
        if self._remote is None:
            self._remote = ray.remote(max_retries=self.max_retries)(_run_chunk)
        return self._remote

    def close(self) -> None:
        """Shut down the Ray this executor started (a joined cluster keeps running)."""
        if self._started and self._ray is not None:
            self._ray.shutdown()
        self._started = False
        self._ray = None
        self._remote = None


def executor_from_spec(spec: str, num_cpus: int | None = None) -> LocalExecutor | RayExecutor:
    """``local``, ``ray`` or ``ray:ADDRESS`` (e.g. ``ray:10.0.0.5:6379``, ``ray:auto``)."""
    text = spec.strip()
    if text == "local":
        return LocalExecutor()
    kind, sep, address = text.partition(":")
    if kind == "ray":
        if sep and not address:
            raise ConfigError("--executor ray: needs an address after the colon, "
                              "e.g. ray:HOST:6379 (or plain `ray` for a local Ray)")
        return RayExecutor(address or None, num_cpus=num_cpus)
    raise ConfigError(f"unknown executor {spec!r}: use local, ray or ray:HOST:PORT")
