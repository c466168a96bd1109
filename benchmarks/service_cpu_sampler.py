"""A CPU-time sampler inside a server process, for ``bench_service_cpu.py``.

``install()`` sets the signal handlers. ``SIGUSR1`` clears what was gathered and arms a timer
on the main thread's own CPU clock (``timer_create`` with ``CLOCK_THREAD_CPUTIME_ID``, its
``SIGPROF`` sent to that thread) each :data:`INTERVAL_S` of its CPU: the main thread's CPU
since the last sample goes to the frame the signal interrupted, which is where it was
running. The event loop runs there; a thread pool's work item (``asyncio.to_thread``: the
retrieval) is timed whole on its thread's clock and counted to its function. So the weights
are CPU seconds, not wall time: a thread waiting for a core or for the GIL adds nothing (a
wall-clock sampler such as py-spy counts a thread that a socket write has just made wait for
a core as busy at that write, and a process-wide CPU timer lands on the main thread when it
wakes, not where it spent its CPU). ``SIGUSR2`` disarms the timer and writes the stacks to
``$BENCH_SERVICE_CPU_SAMPLES`` in the collapsed format (``frame;frame;... µs``, outermost
first, a frame ``qualname (path:line)`` with the path from the package). Linux only.

Used as the server's entry point: ``python service_cpu_sampler.py serve --kb ...`` runs
``medverify`` with these arguments, the sampler installed.
"""

from __future__ import annotations

import contextvars
import ctypes
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

INTERVAL_S = 0.001
"""CPU seconds of the main thread between two samples."""

_ROOTS = ("/site-packages/", "/src/", f"/python{sys.version_info[0]}.{sys.version_info[1]}/")

_POOL = "ThreadPoolExecutor (concurrent/futures/thread.py:0)"
_run_item = thread._WorkItem.run
_MAIN = threading.main_thread().ident  # the key of its clock reading in _last
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


def _pool_run(item: Any) -> None:
    """A thread pool's work item, its CPU (the thread's clock) counted to its function."""
    func = item.fn
    while isinstance(func, partial):  # asyncio.to_thread: partial(Context.run, func, ...)
        runs_in_context = isinstance(getattr(func.func, "__self__", None), contextvars.Context)
        func = func.args[0] if runs_in_context and func.args else func.func
    module = getattr(func, "__module__", None) or "?"
    name = f"{getattr(func, '__qualname__', '?')} ({module.replace('.', '/')}.py:0)"
    started = time.thread_time()
    try:
        _run_item(item)
    finally:
        if _armed:
            _weights[f"{_POOL};{name}"] += time.thread_time() - started


def _sample(_signum: int, frame: FrameType | None) -> None:
    """The main thread's CPU since the last sample, to the frame the signal interrupted."""
    now = time.thread_time()  # the handler runs on the main thread
    used = now - _last.get(_MAIN, now)
    _last[_MAIN] = now
    if used > 0:
        _weights[_stack(frame)] += used


class _SigEvent(ctypes.Structure):
    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int),
                ("notify", ctypes.c_int), ("tid", ctypes.c_int), ("pad", ctypes.c_int * 11)]


class _TimeSpec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("interval", _TimeSpec), ("value", _TimeSpec)]


_libc = ctypes.CDLL(None, use_errno=True)
_timer = ctypes.c_void_p()
_CLOCK_THREAD_CPUTIME_ID, _SIGEV_THREAD_ID = 3, 4


def _arm(interval_s: float) -> None:
    """A timer on the main thread's own CPU clock, its signal sent to the main thread:
    a sample falls where the main thread is running (Linux ``timer_create``)."""
    if not _timer.value:
        event = _SigEvent(signo=signal.SIGPROF, notify=_SIGEV_THREAD_ID,
                          tid=threading.get_native_id())
        if _libc.timer_create(_CLOCK_THREAD_CPUTIME_ID, ctypes.byref(event),
                              ctypes.byref(_timer)) != 0:
            raise OSError(ctypes.get_errno(), "timer_create")
    sec, nsec = int(interval_s), round((interval_s % 1) * 1e9)
    spec = _ITimerSpec(_TimeSpec(sec, nsec), _TimeSpec(sec, nsec))
    if _libc.timer_settime(_timer, 0, ctypes.byref(spec), None) != 0:
        raise OSError(ctypes.get_errno(), "timer_settime")


def _start(_signum: int, _frame: FrameType | None) -> None:
    global _armed
    _weights.clear()
    _last.clear()
    _armed = True
    _arm(INTERVAL_S)


def _write(_signum: int, _frame: FrameType | None) -> None:
    global _armed
    _arm(0.0)
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
