"""Executors (local, Ray) and `eval pairs --executor`."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from medverify.cli import main
from medverify.config import Config
from medverify.errors import ConfigError
from medverify.evals.pairs import (
    PAIR_CHUNK,
    PairChunkJudge,
    PairsEval,
    evaluate_pairs,
    evaluate_pairs_on,
    load_pairs,
)
from medverify.executor import (
    Executor,
    LocalExecutor,
    RayExecutor,
    check_reachable,
    chunked,
    executor_from_spec,
)
from medverify.judge import JUDGES
from medverify.testing.judge import WordJudge, word_judge
from ray_cluster import NoRay, needs_ray

EVIDENCE = "The usual starting dose of metformin is 500 mg daily with meals."
CLAIMS = [
    ("The starting dose of metformin is 500 mg.", "SUPPORTED"),
    ("Metformin is taken with meals.", "SUPPORTED"),
    ("Gout attacks happen at night.", "NOT_ENOUGH_INFO"),
    ("The starting dose of metformin is 5000 mg.", "CONTRADICTED"),
]


def _write_pairs(path: Path, n: int, labels: str = "3-way") -> Path:
    rows = []
    for i in range(n):
        claim, label = CLAIMS[i % len(CLAIMS)]
        if labels == "2-way":
            label = "SUPPORTED" if label == "SUPPORTED" else "NOT_SUPPORTED"
        rows.append(json.dumps({"id": f"{path.stem}-{i}", "dataset": path.stem, "claim": claim,
                                "evidence": EVIDENCE, "label": label, "labels": labels}))
    path.write_text("\n".join(rows) + "\n", "utf-8")
    return path


@pytest.fixture
def words(monkeypatch: pytest.MonkeyPatch) -> Config:
    """The deterministic `words` judge registered by name; its config."""
    monkeypatch.setitem(JUDGES._factories, "words", word_judge)
    return Config(judge="words")


@pytest.fixture
def pair_files(tmp_path: Path) -> list[Path]:
    # more than one chunk in the first file, a partial chunk in the second
    return [_write_pairs(tmp_path / "three.jsonl", PAIR_CHUNK * 2 + 17),
            _write_pairs(tmp_path / "two.jsonl", 40, "2-way")]


def _stable(result: PairsEval) -> dict[str, Any]:
    """The result without timings."""
    data = result.model_dump(exclude={"created_at"})
    for scores in [*data["files"], *([data["overall"]] if data["overall"] else [])]:
        scores.pop("seconds")
        scores.pop("pairs_per_second")
    return data


# ---- LocalExecutor --------------------------------------------------------------------------


def test_chunked() -> None:
    assert chunked([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert chunked([], 3) == []
    with pytest.raises(ValueError):
        chunked([1], 0)


def test_local_executor_keeps_order_and_reports_progress() -> None:
    seen: list[list[int]] = []
    progress: list[int] = []

    def square(chunk: list[int]) -> list[int]:
        seen.append(chunk)
        return [x * x for x in chunk]

    executor = LocalExecutor()
    assert isinstance(executor, Executor)
    out = executor.map(square, list(range(10)), chunk_size=4, progress=progress.append)
    assert out == [x * x for x in range(10)]
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert progress == [4, 4, 2]
    assert executor.map(square, [], chunk_size=4) == []


def test_local_executor_rejects_a_chunk_with_missing_results() -> None:
    with pytest.raises(RuntimeError, match="chunk 1: 2 items gave 1 results"):
        LocalExecutor().map(lambda chunk: chunk[:1] if chunk[0] else chunk, [0, 0, 1, 2],
                            chunk_size=2)


# ---- specs and the missing dependency ---------------------------------------------------------


def test_executor_from_spec() -> None:
    assert isinstance(executor_from_spec("local"), LocalExecutor)
    local_ray = executor_from_spec("ray", num_cpus=2)
    assert isinstance(local_ray, RayExecutor)
    assert local_ray.address is None and local_ray.num_cpus == 2
    cluster = executor_from_spec("ray:10.0.0.5:6379")
    assert isinstance(cluster, RayExecutor) and cluster.address == "10.0.0.5:6379"
    auto = executor_from_spec("ray:auto")
    assert isinstance(auto, RayExecutor) and auto.address == "auto"
    with pytest.raises(ConfigError, match="needs an address"):
        executor_from_spec("ray:")
    with pytest.raises(ConfigError, match="unknown executor 'dask'"):
        executor_from_spec("dask")


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    executor = RayExecutor(num_cpus=2)
    with pytest.raises(ConfigError, match=r"pip install 'medverify\[ray\]'"):
        executor.map(lambda chunk: chunk, [1, 2])
    assert executor.map(lambda chunk: chunk, []) == []  # nothing to do: Ray is not needed


def test_cli_missing_ray_and_bad_spec(monkeypatch: pytest.MonkeyPatch, words: Config,
                                      pair_files: list[Path]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    runner = CliRunner()
    missing = runner.invoke(main, ["eval", "pairs", str(pair_files[1]), "--judge", "words",
                                   "--executor", "ray"])
    assert missing.exit_code != 0
    assert "medverify[ray]" in missing.output
    bad = runner.invoke(main, ["eval", "pairs", str(pair_files[1]), "--judge", "words",
                               "--executor", "spark"])
    assert bad.exit_code != 0 and "unknown executor" in bad.output


def test_unreachable_address_is_a_clear_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr("medverify.executor._import_ray", lambda: NoRay)
    executor = executor_from_spec(f"ray:127.0.0.1:{port}")
    with pytest.raises(ConfigError, match=f"no Ray cluster answers at 127.0.0.1:{port}"):
        executor.map(lambda chunk: chunk, [1, 2])
    check_reachable("auto")  # no port: left to Ray


# ---- eval pairs on the local executor ---------------------------------------------------------


def test_pairs_on_local_executor_equal_the_old_path(words: Config,
                                                    pair_files: list[Path]) -> None:
    old = evaluate_pairs(pair_files, WordJudge())
    progress: list[int] = []
    new = evaluate_pairs_on(LocalExecutor(), pair_files, words, progress=progress.append)
    assert _stable(new) == _stable(old)
    assert progress == [PAIR_CHUNK, PAIR_CHUNK, 17, 40]
    assert new.files[0].n == PAIR_CHUNK * 2 + 17 and new.overall is not None


def test_pair_chunk_judge_registers_the_judge_in_a_fresh_process(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A worker that never saw the driver's registration makes the same judge."""
    task = PairChunkJudge(Config(judge="words"), word_judge)
    monkeypatch.setattr(JUDGES, "_factories", dict(JUDGES._factories))
    JUDGES._factories.pop("words", None)
    assert "words" not in JUDGES
    pairs = load_pairs(_write_pairs(tmp_path / "fresh.jsonl", 3))
    verdicts = task(pairs)
    assert [v.claim_id if v else None for v in verdicts] == [p.id for p in pairs]
    assert "words" in JUDGES


def test_cli_executor_local_equals_the_old_path(words: Config, pair_files: list[Path],
                                                tmp_path: Path) -> None:
    cli = _eval_cli(pair_files, tmp_path, "local")
    assert _stable(cli) == _stable(evaluate_pairs(pair_files, WordJudge()))


def _eval_cli(pair_files: list[Path], tmp_path: Path, executor: str) -> PairsEval:
    """``eval pairs --judge words --executor EXECUTOR --json``, read back."""
    out = tmp_path / f"{executor}.json"
    result = CliRunner().invoke(main, ["eval", "pairs", *map(str, pair_files), "--judge",
                                       "words", "--executor", executor, "--json", str(out)])
    assert result.exit_code == 0, result.output
    return PairsEval.model_validate_json(out.read_text("utf-8"))


# ---- Ray (slow: starts a local Ray with 2 CPUs) ---------------------------------------------


@pytest.mark.slow
@needs_ray
def test_ray_executor_keeps_order_and_reports_progress(ray_executor: RayExecutor) -> None:
    def double(chunk: list[int]) -> list[int]:  # defined here: Ray pickles it by value
        return [2 * x for x in chunk]

    progress: list[int] = []
    out = ray_executor.map(double, list(range(25)), chunk_size=4, progress=progress.append)
    assert out == [2 * x for x in range(25)]
    assert sorted(progress) == [1, 4, 4, 4, 4, 4, 4]


@pytest.mark.slow
@needs_ray
def test_ray_pairs_equal_local(ray_executor: RayExecutor, words: Config,
                               pair_files: list[Path]) -> None:
    progress: list[int] = []
    on_ray = evaluate_pairs_on(ray_executor, pair_files, words, progress=progress.append)
    local = evaluate_pairs_on(LocalExecutor(), pair_files, words)
    assert _stable(on_ray) == _stable(local) == _stable(evaluate_pairs(pair_files, WordJudge()))
    assert sum(progress) == PAIR_CHUNK * 2 + 17 + 40


@pytest.mark.slow
@needs_ray
def test_ray_redoes_the_task_of_a_dead_worker_and_counts_it_once(
        ray_executor: RayExecutor, tmp_path: Path) -> None:
    marker = tmp_path / "died"
    calls = tmp_path / "calls"
    calls.mkdir()

    def die_once(chunk: list[int]) -> list[int]:  # defined here: Ray pickles it by value
        (calls / f"{chunk[0]}-{os.getpid()}-{len(list(calls.iterdir()))}").touch()
        if chunk[0] == 3 and not marker.exists():
            marker.touch()
            os._exit(1)  # the worker dies mid-task
        return [x + 100 for x in chunk]

    progress: list[int] = []
    out = ray_executor.map(die_once, list(range(9)), chunk_size=3, progress=progress.append)
    assert marker.exists()
    assert out == [x + 100 for x in range(9)]
    assert sorted(progress) == [3, 3, 3]  # the retried chunk is counted once
    starts = [name.name.split("-")[0] for name in calls.iterdir()]
    assert starts.count("3") == 2 and starts.count("0") == starts.count("6") == 1


@pytest.mark.slow
@needs_ray
def test_cli_executor_ray_writes_the_same_result(ray_executor: RayExecutor, words: Config,
                                                 pair_files: list[Path],
                                                 tmp_path: Path) -> None:
    on_ray = _eval_cli(pair_files, tmp_path, "ray")
    assert _stable(on_ray) == _stable(evaluate_pairs(pair_files, WordJudge()))



@pytest.mark.slow
@needs_ray
def test_a_process_joined_to_one_cluster_refuses_another(ray_executor: RayExecutor) -> None:
    ray = ray_executor._connect()
    here = ray.get_runtime_context().gcs_address
    joined = RayExecutor(here)  # the cluster this process is on: used as it is
    assert joined.map(lambda chunk: [x + 1 for x in chunk], [1, 2]) == [2, 3]
    with socket.socket() as other:  # something listens there, but it is another address
        other.bind(("127.0.0.1", 0))
        other.listen()
        elsewhere = RayExecutor(f"127.0.0.1:{other.getsockname()[1]}")
        with pytest.raises(ConfigError, match="already connected to the Ray cluster"):
            elsewhere.map(lambda chunk: chunk, [1])
