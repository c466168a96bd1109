"""`medverify risk features --executor`: blocks of features computed on an executor (local or
Ray) give the same feature file as the local path, resume the same way, and a block whose
worker dies is computed again and written once. Offline: a fake word scorer, no model."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from medverify.cli import main
from medverify.config import Config
from medverify.executor import LocalExecutor, RayExecutor
from medverify.risk.data import write_examples
from medverify.risk.records import FeatureExample, LabeledExample, RiskLabel
from medverify.risk.scorers import SCORERS
from medverify.risk.stage import FEATURE_BLOCK, FeatureBlockTask, feature_blocks_on
from ray_cluster import NoRay, needs_ray

N_EXAMPLES = FEATURE_BLOCK * 3 + 7  # three full blocks and a short one
DIE_TEXT = "Warfarin needs regular blood tests."


def fake_scorers(marker: Path | None = None) -> Callable[..., Any]:
    """A factory of deterministic word scorers (no model). Everything is defined in here so
    that Ray pickles it by value (a worker cannot import this test module). With ``marker``,
    the process scoring :data:`DIE_TEXT` dies once (``os._exit``), leaving the marker."""
    from medverify.risk.records import TokenStep, TokenTrace, TopToken

    class FakeScorer:
        k = 2

        def __init__(self, spec: str) -> None:
            self.id = spec

        async def score(self, items: Sequence[Any]) -> list[TokenTrace]:
            if marker is not None and not marker.exists() and any(
                    item.answer == DIE_TEXT for item in items):
                marker.write_text(str(os.getpid()), "utf-8")
                os._exit(1)  # the worker dies mid-block
            return [self._trace(item) for item in items]

        def _trace(self, item: Any) -> TokenTrace:
            steps, start = [], 0
            for n, word in enumerate(item.answer.split()):
                start = item.answer.index(word, start)
                logprob = -0.1 * len(word) - 0.01 * n
                top = [TopToken(token=word, logprob=logprob),
                       TopToken(token=" x", logprob=logprob - 1.5)]
                steps.append(TokenStep(token=word, start=start, end=start + len(word),
                                       logprob=logprob, rank=1 + len(word) % 2, top=top))
                start += len(word)
            return TokenTrace(scorer=self.id, question=item.question, answer=item.answer,
                              context=item.context, k=2, steps=steps,
                              prompt_variant=item.prompt_variant)

    def factory(spec: str, settings: Any) -> FakeScorer:
        return FakeScorer(spec)

    return factory


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Two fake scorers registered under ``fake``; their specs."""
    monkeypatch.setitem(SCORERS._factories, "fake", fake_scorers())
    return ["fake:words-a", "fake:words-b"]


TEXTS = [
    "Metformin is a first-line medicine for type 2 diabetes.",
    "The usual starting dose of metformin is 5000 mg daily.",
    "Aspirin lowers the risk of heart attack in some adults.",
    "Insulin raises blood glucose in everyone.",
    "Vaccines help prevent infections.",
]


@pytest.fixture
def examples(tmp_path: Path) -> Path:
    rows = [LabeledExample(id=f"e{n}", question=f"Question {n % 7}?",
                           text=DIE_TEXT if n == FEATURE_BLOCK + 3 else TEXTS[n % len(TEXTS)],
                           context="A context." if n % 3 == 0 else None,
                           label=RiskLabel.HALLUCINATION if n % 2 else RiskLabel.FACT,
                           provenance={"n": n})
            for n in range(N_EXAMPLES)]
    return write_examples(tmp_path / "examples.jsonl", rows)


def _features(examples: Path, scorers: list[str], out: Path, *extra: str) -> Result:
    args = ["risk", "features", str(examples), *[a for s in scorers for a in ("--scorer", s)],
            "--out", str(out), *extra]
    return CliRunner().invoke(main, args)


def _ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def _files(out: Path) -> tuple[bytes, bytes]:
    """The feature file and its schema, as bytes."""
    return out.read_bytes(), out.with_name(out.name + ".schema.json").read_bytes()


@pytest.fixture
def local_run(examples: Path, fake: list[str], tmp_path: Path) -> tuple[bytes, bytes]:
    """The feature file the local path (no --executor) writes."""
    out = tmp_path / "local.jsonl"
    _ok(_features(examples, fake, out))
    return _files(out)


class _Elsewhere:
    """A LocalExecutor that is not one (so the CLI takes the executor path): chunks in
    ``order`` (reversed: as a cluster might finish them), stopping with an error after
    ``stop_after`` chunks (a driver killed mid-run)."""

    name = "elsewhere"
    slots = 2

    def __init__(self, *, reverse: bool = False, stop_after: int | None = None) -> None:
        self.reverse = reverse
        self.stop_after = stop_after
        self.chunks: list[int] = []
        self.closed = False

    def imap(self, fn: Any, items: Sequence[Any], *, chunk_size: int,
             progress: Any = None) -> Iterator[tuple[int, list[Any]]]:
        done = list(LocalExecutor().imap(fn, items, chunk_size=chunk_size, progress=progress))
        for index, results in reversed(done) if self.reverse else done:
            if self.stop_after is not None and len(self.chunks) >= self.stop_after:
                raise RuntimeError("killed")
            self.chunks.append(index)
            yield index, results

    def close(self) -> None:
        self.closed = True


def _use(monkeypatch: pytest.MonkeyPatch, executor: Any) -> None:
    monkeypatch.setattr("medverify.executor.executor_from_spec",
                        lambda spec, num_cpus=None: executor)


# ---- the executor path, in this process ---------------------------------------------------


def test_local_executor_path_equals_the_local_path(examples: Path, fake: list[str],
                                                   local_run: tuple[bytes, bytes],
                                                   tmp_path: Path) -> None:
    """feature_blocks_on(LocalExecutor()) writes the partial file, and the CLI then the
    feature file, byte for byte as feature_blocks does."""
    from medverify.cli.risk import _resume_key
    from medverify.risk.data import read_examples
    from medverify.risk.stage import RiskStage, feature_blocks, partial_path

    config = Config()
    stage = RiskStage.from_config(config, scorers=fake)
    key = _resume_key(stage, examples, None)
    rows = read_examples(examples)
    old_out, new_out = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    old, old_resumed = asyncio.run(feature_blocks(stage, rows, old_out, key=key))
    progress: list[int] = []
    new, new_resumed = feature_blocks_on(LocalExecutor(), FeatureBlockTask.for_config(
        config, fake), rows, new_out, key=key, progress=progress.append)
    assert new == old and new_resumed == old_resumed == 0
    assert partial_path(new_out).read_bytes() == partial_path(old_out).read_bytes()
    assert progress == [FEATURE_BLOCK] * 3 + [7]  # as each block completes
    assert [line.id for line in new] == [e.id for e in rows]
    assert local_run[0] == b"".join(line.model_dump_json().encode() + b"\n" for line in new)


def test_cli_executor_path_writes_the_local_file(monkeypatch: pytest.MonkeyPatch,
                                                 examples: Path, fake: list[str],
                                                 local_run: tuple[bytes, bytes],
                                                 tmp_path: Path) -> None:
    """Blocks coming back last first are written in input order: the same file."""
    executor = _Elsewhere(reverse=True)
    _use(monkeypatch, executor)
    out = tmp_path / "elsewhere.jsonl"
    _ok(_features(examples, fake, out, "--executor", "elsewhere"))
    assert executor.chunks == [3, 2, 1, 0] and executor.closed
    assert _files(out) == local_run
    assert not out.with_name(out.name + ".partial").exists()


@pytest.mark.parametrize("reverse", [False, True])
def test_an_interrupted_executor_run_resumes_to_the_same_file(
        monkeypatch: pytest.MonkeyPatch, examples: Path, fake: list[str],
        local_run: tuple[bytes, bytes], tmp_path: Path, reverse: bool) -> None:
    """A driver killed after two blocks came back leaves the blocks it could write in
    order (both in input order; none when they came last first); the rerun keeps them and
    computes only the rest."""
    out = tmp_path / "interrupted.jsonl"
    partial = out.with_name(out.name + ".partial")
    _use(monkeypatch, _Elsewhere(reverse=reverse, stop_after=2))
    killed = _features(examples, fake, out, "--executor", "elsewhere")
    assert killed.exit_code != 0 and str(killed.exception) == "killed"
    written = partial.read_text("utf-8").splitlines()
    assert len(written) == 1 + (0 if reverse else 2 * FEATURE_BLOCK)  # header + blocks
    rerun = _Elsewhere(reverse=reverse)
    _use(monkeypatch, rerun)
    result = _ok(_features(examples, fake, out, "--executor", "elsewhere"))
    assert _files(out) == local_run
    assert len(rerun.chunks) == (4 if reverse else 2)
    if not reverse:
        assert f"{2 * FEATURE_BLOCK} resumed" in " ".join(result.output.split())


def test_a_partial_file_of_the_local_path_is_completed_by_the_executor_path(
        monkeypatch: pytest.MonkeyPatch, examples: Path, fake: list[str],
        local_run: tuple[bytes, bytes], tmp_path: Path) -> None:
    """What a kill of the local path after one block and half a line leaves (the header, 32
    lines, a cut line) is completed by the executor path into the same file."""
    out = tmp_path / "resumed.jsonl"
    partial = out.with_name(out.name + ".partial")
    lines = local_run[0].decode("utf-8").splitlines()
    partial.write_text(_header(examples, fake) + "\n" + "\n".join(lines[:FEATURE_BLOCK])
                       + "\n" + lines[FEATURE_BLOCK][:40], "utf-8")
    executor = _Elsewhere()
    _use(monkeypatch, executor)
    result = _ok(_features(examples, fake, out, "--executor", "elsewhere"))
    assert f"{FEATURE_BLOCK} resumed" in " ".join(result.output.split())
    assert executor.chunks == [0, 1, 2]  # the three blocks left
    assert _files(out) == local_run and not partial.exists()


def test_blocks_appended_after_a_cut_line_are_resumed_too(
        monkeypatch: pytest.MonkeyPatch, examples: Path, fake: list[str],
        local_run: tuple[bytes, bytes], tmp_path: Path) -> None:
    """A kill cuts a line; the next run ends it with a newline before appending, so the
    block it finishes before its own kill is resumed by the third run (the cut line alone
    is skipped; before, reading stopped at it and every later block was computed again)."""
    out = tmp_path / "twice.jsonl"
    partial = out.with_name(out.name + ".partial")
    lines = local_run[0].decode("utf-8").splitlines()
    partial.write_text(_header(examples, fake) + "\n" + "\n".join(lines[:FEATURE_BLOCK])
                       + "\n" + lines[FEATURE_BLOCK][:40], "utf-8")
    _use(monkeypatch, _Elsewhere(stop_after=1))
    killed = _features(examples, fake, out, "--executor", "elsewhere")
    assert killed.exit_code != 0 and str(killed.exception) == "killed"
    kept = partial.read_text("utf-8").splitlines()
    assert kept[FEATURE_BLOCK + 1] == lines[FEATURE_BLOCK][:40]  # the cut line, on its own
    assert kept[FEATURE_BLOCK + 2:] == lines[FEATURE_BLOCK:2 * FEATURE_BLOCK]
    executor = _Elsewhere()
    _use(monkeypatch, executor)
    result = _ok(_features(examples, fake, out, "--executor", "elsewhere"))
    assert f"{2 * FEATURE_BLOCK} resumed" in " ".join(result.output.split())
    assert executor.chunks == [0, 1]  # the two blocks left
    assert _files(out) == local_run and not partial.exists()


def _header(examples: Path, scorers: list[str]) -> str:
    """The partial file's first line for these scorers on this input (its resume key)."""
    from medverify.cli.risk import _resume_key
    from medverify.risk.stage import RiskStage, _PartialHeader

    stage = RiskStage.from_config(Config(), scorers=scorers)
    return _PartialHeader(partial=_resume_key(stage, examples, None)).model_dump_json()


def test_feature_block_task_registers_the_scorers_in_a_fresh_process(
        monkeypatch: pytest.MonkeyPatch, fake: list[str]) -> None:
    """A worker that never saw the driver's registration makes the same scorers."""
    task = FeatureBlockTask.for_config(Config(), fake)
    monkeypatch.setattr(SCORERS, "_factories", dict(SCORERS._factories))
    SCORERS._factories.pop("fake")
    monkeypatch.setattr("medverify.risk.stage._WORKER_STAGES", {})
    chunk = [LabeledExample(id="x", question="Q?", text="Insulin lowers blood glucose.",
                            label=RiskLabel.FACT)]
    [line] = task(chunk)
    assert isinstance(line, FeatureExample) and line.id == "x" and line.row.unit_id == "x"
    assert line.row.values["m0.n_tokens"] == 4 and "fake" in SCORERS


# ---- the command line: bad executors ------------------------------------------------------


def test_cli_unreachable_cluster_names_the_address(monkeypatch: pytest.MonkeyPatch,
                                                   examples: Path, fake: list[str],
                                                   tmp_path: Path) -> None:
    monkeypatch.setattr("medverify.executor._import_ray", lambda: NoRay)
    out = tmp_path / "f.jsonl"
    result = _features(examples, fake, out, "--executor", "ray:127.0.0.1:1")
    assert result.exit_code == 2, result.output
    assert "no Ray cluster answers at 127.0.0.1:1" in result.output
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()


def test_cli_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch, examples: Path,
                                         fake: list[str], tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    out = tmp_path / "f.jsonl"
    result = _features(examples, fake, out, "--executor", "ray")
    assert result.exit_code == 2 and "pip install 'medverify[ray]'" in result.output
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()
    bad = _features(examples, fake, out, "--executor", "spark")
    assert bad.exit_code == 2 and "unknown executor 'spark'" in bad.output


# ---- Ray (slow: a local Ray with 2 CPUs) -----------------------------------------------------


@pytest.mark.slow
@needs_ray
def test_ray_writes_the_local_file(ray_executor: RayExecutor, examples: Path,
                                   fake: list[str], local_run: tuple[bytes, bytes],
                                   tmp_path: Path) -> None:
    out = tmp_path / "ray.jsonl"
    _ok(_features(examples, fake, out, "--executor", "ray"))
    assert _files(out) == local_run
    assert not out.with_name(out.name + ".partial").exists()


@pytest.mark.slow
@needs_ray
def test_ray_completes_a_partial_file(ray_executor: RayExecutor, examples: Path,
                                      fake: list[str], local_run: tuple[bytes, bytes],
                                      tmp_path: Path) -> None:
    out = tmp_path / "resumed.jsonl"
    lines = local_run[0].decode("utf-8").splitlines()
    out.with_name(out.name + ".partial").write_text(
        _header(examples, fake) + "\n" + "\n".join(lines[:2 * FEATURE_BLOCK]) + "\n", "utf-8")
    result = _ok(_features(examples, fake, out, "--executor", "ray"))
    assert f"{2 * FEATURE_BLOCK} resumed" in " ".join(result.output.split())
    assert _files(out) == local_run


@pytest.mark.slow
@needs_ray
def test_ray_recomputes_the_block_of_a_dead_worker_and_writes_it_once(
        ray_executor: RayExecutor, monkeypatch: pytest.MonkeyPatch, examples: Path,
        tmp_path: Path) -> None:
    marker = tmp_path / "died"
    monkeypatch.setitem(SCORERS._factories, "fake", fake_scorers(marker))
    scorers = ["fake:dies-once"]
    out = tmp_path / "ray.jsonl"
    _ok(_features(examples, scorers, out, "--executor", "ray"))
    assert marker.exists()  # a worker died scoring block 1, and Ray ran the block again
    local = tmp_path / "local.jsonl"
    _ok(_features(examples, scorers, local))  # the marker is there: nothing dies now
    assert _files(out) == _files(local)
    ids = [FeatureExample.model_validate_json(x).id
           for x in out.read_text("utf-8").splitlines()]
    assert ids == [f"e{n}" for n in range(N_EXAMPLES)]  # every line once, in order
