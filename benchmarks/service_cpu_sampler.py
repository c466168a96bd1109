"""A CPU-time sampler inside a server process, for ``bench_service_cpu.py``.

``install()`` sets the signal handlers; ``SIGUSR1`` clears what was gathered and arms
``ITIMER_PROF`` (a ``SIGPROF`` each :data:`INTERVAL_S` of the process's CPU, all threads
together); ``SIGUSR2`` disarms it and writes the stacks to ``$BENCH_SERVICE_CPU_SAMPLES``.
At each signal every thread's own CPU clock is read; the CPU a thread used since the last
signal is added to its stack as it stands then (the main thread's: the frame the signal
interrupted); a thread pool's work item (``asyncio.to_thread``) is timed whole on its
thread's clock and counted to its function. So the weights are CPU seconds, not wall
time: a thread waiting for a core or for the GIL adds nothing (a wall-clock sampler such as
py-spy counts a thread that a socket write has just made wait for a core as busy at that
write). The stacks are written in the collapsed format (``frame;frame;... µs``, outermost
first, a frame ``qualname (path:line)`` with the path from the package).

Used as the server's entry point: ``python service_cpu_sampler.py serve --kb ...`` runs
``medverify`` with these arguments, the sampler installed.
"""

from __future__ import annotations

import contextvars
import os
import runpy
import signal
import sys
import threading
import time
from collections import Counter
from concurrent.futures import thread
from functools import partial
from types import FrameType
from typing import Any

INTERVAL_S = 0.002
"""CPU seconds (the process's, all threads) between two samples."""

_ROOTS = ("/site-packages/", "/src/", f"/python{sys.version_info[0]}.{sys.version_info[1]}/")

_POOL = "ThreadPoolExecutor (concurrent/futures/thread.py:0)"
_run_item = thread._WorkItem.run
_pool_threads: set[int] = set()
_MAIN = threading.main_thread().ident
_armed = False
_weights: Counter[str] = Counter()
_last: dict[int, float] = {}
_names: dict[tuple[str, str, int], str] = {}


def _frame_name(frame: FrameType) -> str:
    code = frame.f_code
    key = (code.co_filename, code.co_qualname, frame.f_lineno)
    name = _names.get(key)
    if name is None:
        path = code.co_filename
        for root in _ROOTS:
            if root in path:
                path = path.rsplit(root, 1)[1]
                break
        name = _names[key] = f"{code.co_qualname} ({path}:{frame.f_lineno})"
    return name


def _stack(frame: FrameType | None) -> str:
    names = []
    while frame is not None:
        names.append(_frame_name(frame))
        frame = frame.f_back
    return ";".join(reversed(names))


def _thread_cpu_s(ident: int) -> float | None:
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (OSError, ProcessLookupError):
        return None


def _pool_run(item: Any) -> None:
    """A thread pool's work item, its CPU (the thread's clock) counted to its function."""
    func = item.fn
    while isinstance(func, partial):  # asyncio.to_thread: partial(Context.run, func, ...)
        runs_in_context = isinstance(getattr(func.func, "__self__", None), contextvars.Context)
        func = func.args[0] if runs_in_context and func.args else func.func
    module = getattr(func, "__module__", None) or "?"
    name = f"{getattr(func, '__qualname__', '?')} ({module.replace('.', '/')}.py:0)"
    _pool_threads.add(threading.get_ident())
    started = time.thread_time()
    try:
        _run_item(item)
    finally:
        if _armed:
            _weights[f"{_POOL};{name}"] += time.thread_time() - started


def _sample(_signum: int, frame: FrameType | None) -> None:
    main = _MAIN
    for ident, current in sys._current_frames().items():
        if ident in _pool_threads:
            continue  # counted per work item (_pool_run)
        now = _thread_cpu_s(ident)
        if now is None:
            continue
        used = now - _last.get(ident, now)
        _last[ident] = now
        if used > 0:
            _weights[_stack(frame if ident == main else current)] += used


def _start(_signum: int, _frame: FrameType | None) -> None:
    global _armed
    _weights.clear()
    _last.clear()
    _armed = True
    signal.setitimer(signal.ITIMER_PROF, INTERVAL_S, INTERVAL_S)


def _write(_signum: int, _frame: FrameType | None) -> None:
    global _armed
    signal.setitimer(signal.ITIMER_PROF, 0, 0)
    _armed = False
    path = os.environ.get("BENCH_SERVICE_CPU_SAMPLES")
    if path:
        lines = [f"{stack} {round(1e6 * s)}" for stack, s in _weights.items() if s > 0]
        with open(path + ".tmp", "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
        os.replace(path + ".tmp", path)


def install() -> None:
    thread._WorkItem.run = _pool_run  # type: ignore[method-assign]
    signal.signal(signal.SIGPROF, _sample)
    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _write)


if __name__ == "__main__":
    install()
    sys.argv = ["medverify", *sys.argv[1:]]
    runpy.run_module("medverify", run_name="__main__", alter_sys=True)
