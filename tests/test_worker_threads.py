"""The xdist workers' thread share (tests/worker_threads.py): the usable cores divided by the
workers, set only where no thread count is set, nothing outside xdist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker_threads import THREAD_VARIABLES, limit_threads, worker_share


def _cores() -> int:
    return len(os.sched_getaffinity(0))


@pytest.mark.parametrize("workers", [1, 2, 3, 1000])
def test_the_share_is_the_cores_per_worker_and_at_least_one(workers: int) -> None:
    env = {"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": str(workers)}
    assert worker_share(env) == max(1, _cores() // workers)
    assert limit_threads(env) == worker_share(env)
    assert {env[name] for name in THREAD_VARIABLES} == {str(max(1, _cores() // workers))}


def test_a_thread_count_already_set_is_kept() -> None:
    env = {"PYTEST_XDIST_WORKER": "gw1", "PYTEST_XDIST_WORKER_COUNT": str(2 * _cores()),
           "OMP_NUM_THREADS": "7"}
    limit_threads(env)
    assert env["OMP_NUM_THREADS"] == "7"
    assert env["OPENBLAS_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"


@pytest.mark.parametrize("env", [{}, {"PYTEST_XDIST_WORKER_COUNT": "2"},
                                 {"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "x"}])
def test_outside_an_xdist_worker_nothing_is_set(env: dict[str, str]) -> None:
    before = dict(env)
    assert limit_threads(env) is None
    assert env == before


def test_a_worker_s_torch_starts_on_its_share() -> None:
    """torch reads OMP_NUM_THREADS when it loads, after conftest set it: checked in a fresh
    interpreter started as an xdist worker would be (this worker's own torch may have been
    given another count by a test that sets threads explicitly)."""
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env.update(PYTEST_XDIST_WORKER="gw0", PYTEST_XDIST_WORKER_COUNT="2",
               PYTHONPATH=str(Path(__file__).parent))
    code = "import worker_threads, torch; print(torch.get_num_threads())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    assert int(out.stdout.strip()) == max(1, _cores() // 2)
