"""Each pytest-xdist worker's share of the CPU cores as its native thread count, set before
numpy, torch or faiss load (conftest.py imports this module first).

``make test`` runs two xdist workers; on CI's two cores each worker's torch, faiss
(OpenMP) and OpenBLAS would otherwise start one thread per core, four spinning threads on
two cores. OpenMP threads spin while they wait for each other, so every small operation
then waits for a descheduled thread: a tiny Qwen2's forward pass took 186 ms a token instead
of a few (tests/llm/test_local_llm.py's prefix test: 68.7 s alone at load 10, 2.8 s with
one thread). The share is the usable cores divided by the workers, at least one; a thread
count already in the environment is kept, and a run without xdist is left alone. Child
processes (the CLI and servers the tests start) inherit it. Tests that are about thread
counts set them explicitly (``torch.set_num_threads``), as before.
"""

from __future__ import annotations

import os

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def worker_share(environ: dict[str, str] | os._Environ[str]) -> int | None:
    """Usable cores per xdist worker (at least 1), or None outside an xdist worker."""
    workers = environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not environ.get("PYTEST_XDIST_WORKER") or not workers or not workers.isdigit():
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    return max(1, cores // max(1, int(workers)))


def limit_threads(environ: dict[str, str] | os._Environ[str]) -> int | None:
    """Set the share in ``environ`` where no thread count is set yet; returns the share."""
    share = worker_share(environ)
    if share is not None:
        for name in THREAD_VARIABLES:
            environ.setdefault(name, str(share))
    return share


limit_threads(os.environ)
