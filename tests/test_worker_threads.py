"""The xdist workers' thread share (tests/worker_threads.py): the usable cores divided by the
workers, set only where no thread count is set, nothing outside xdist."""

from __future__ import annotations

import os

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


def test_this_worker_runs_torch_on_its_share() -> None:
    """Under xdist (make test) this process's torch started with the share (torch reads
    OMP_NUM_THREADS when it loads, after conftest set it)."""
    share = worker_share(os.environ)
    if share is None:
        pytest.skip("not an xdist worker: the thread counts are left alone")
    torch = pytest.importorskip("torch")
    if os.environ["OMP_NUM_THREADS"] != str(share):
        pytest.skip("OMP_NUM_THREADS was set before the run: kept")
    assert torch.get_num_threads() == share
