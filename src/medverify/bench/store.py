"""The benchmark's records in the run store (table ``bench_replies``, migration 0004)."""

from __future__ import annotations

from medverify.bench.records import ModelReply
from medverify.store.runs import RunStore


def bench_replies(store: RunStore, run_id: str) -> list[ModelReply]:
    """The model replies of a benchmark run (a unique id prefix is enough), by model and
    question id."""
    return store.records(run_id, "bench_replies", ModelReply)
