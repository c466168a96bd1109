"""A multiprocessing context for the tests that race processes on one store.

Spawned processes each import medverify again (about 1 s each, 3-10 s on a busy 2-core
machine). A fork server that has imported the store once starts each racing process in
milliseconds; each is still a new process with its own connections, forked from the fresh
server process and never from the test process (whose threads and open handles a plain
fork would copy)."""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import BaseContext

PRELOAD = ["medverify.store.runs"]  # imported once by the fork server (skipped if missing)


def racing_context() -> BaseContext:
    """The ``forkserver`` context, its server preloading :data:`PRELOAD`."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context
