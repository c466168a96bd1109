"""A pytest plugin for benchmarks/bench_test_suite.py: when ``SUITE_TIMELINE_DIR`` is set, each
process of a run (the xdist controller and every worker) writes there, as JSON, the epoch
seconds of its start, the end of its collection, the end of its last test and (the
controller) of its terminal summary, which comes after every worker has exited. So a run's
wall time splits into start-up and collection, the tests, and the wait for the workers to
exit. Loaded with ``-p suite_timeline`` and this folder on PYTHONPATH; inert otherwise."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

_STARTED = time.time()
_TIMES: dict[str, float] = {"start": _STARTED}


def _write() -> None:
    folder = os.environ.get("SUITE_TIMELINE_DIR")
    if folder:
        name = os.environ.get("PYTEST_XDIST_WORKER", "controller")
        Path(folder, f"{name}.json").write_text(json.dumps(_TIMES))


def pytest_collection_finish(session: pytest.Session) -> None:
    _TIMES["collected"] = time.time()


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    _TIMES["last_test"] = time.time()


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary() -> None:
    _TIMES["summary"] = time.time()


def pytest_unconfigure() -> None:
    _write()
