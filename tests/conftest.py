"""What every test shares: an isolated MEDVERIFY_HOME, offline model hubs, the fixtures of
the optional services, and the real-data hooks of :mod:`data_paths`."""

from __future__ import annotations

# First: each xdist worker's share of the cores as its thread count, before numpy loads.
import worker_threads  # noqa: F401  # isort: skip
import atexit
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from chromium_browser import browser  # noqa: F401 (fixture)
from data_paths import ENV as DATA_ENV
from data_paths import (  # noqa: F401 (hooks: the data marker, skipped tests by reason)
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_terminal_summary,
)
from postgres_server import pg_cluster, pg_url, store_location  # noqa: F401 (fixtures)
from ray_cluster import ray_executor  # noqa: F401 (fixture)

# At exit, the interpreter's last garbage collections walk every object the suite made and
# imported (torch, transformers, hypothesis): 2-3 s of each xdist worker's exit, which the
# run waits for. Frozen objects are skipped by them; atexit handlers (the clean-ups of
# tempfile and weakref.finalize) still run.
atexit.register(gc.freeze)


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ONNX export cache for the whole test session, shared by its xdist workers (their
    base folders share a parent): the shipped verifier and MiniLM are exported once a
    session, random test models never land in the user's ~/.cache."""
    import os

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return root / "onnx-cache"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   onnx_cache: Path) -> Iterator[Path]:
    home = tmp_path / "mv-home"
    monkeypatch.setenv("MEDVERIFY_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    for key in list(__import__("os").environ):
        if key.startswith("MEDVERIFY_") and key not in ("MEDVERIFY_HOME", DATA_ENV):
            monkeypatch.delenv(key)
    monkeypatch.setenv("MEDVERIFY_ONNX_CACHE", str(onnx_cache))
    yield home
