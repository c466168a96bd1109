"""`medverify audit --executor`: the audit of answers spread over an executor (Ray).

Offline: a deterministic judge (``words``, by name), the hash embedder and a fetcher of
fixed pages (:class:`StaticPages`, which pickles). An in-process executor that pickles its
task and yields chunks out of order stands in for Ray where Ray is not the point."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from medverify.audit.inputs import read_audit
from medverify.audit.records import AnswerAudit, AuditInput, AuditSummary
from medverify.audit.runner import (
    ANSWERS_FILE,
    SUMMARY_FILE,
    AuditChunk,
    Auditor,
)
from medverify.audit.store import audits as stored_audits
from medverify.cli import main
from medverify.config import Config
from medverify.executor import LocalExecutor, RayExecutor, chunked
from medverify.judge import JUDGES
from medverify.kit import FlowKit
from medverify.sources.factory import ConfigFetcher, default_fetcher
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.fetchers import StaticFetcher, StaticPages
from medverify.testing.judge import keyword_rule, scripted_judge, word_judge
from ray_cluster import NoRay, needs_ray

PAGES = {
    "https://a.org/aspirin": "aspirin thins blood and prevents clots",
    "https://b.org/sleep": "exercise helps sleep quality",
    "https://c.org/colds": "vitamin c does not prevent colds",
}


def _rows() -> list[dict[str, Any]]:
    """Seven answers: given texts, fetched pages, dead links, given and decomposed claims."""
    rows: list[dict[str, Any]] = []
    for n in range(7):
        row: dict[str, Any] = {"id": f"q{n}", "system": "AB"[n % 2]}
        if n % 3 == 0:
            row |= {"answer": "Aspirin thins blood [1]. Statins cure all [2].",
                    "sources": [{"url": "https://a.org/aspirin", "marker": 1},
                                {"url": f"https://dead.example/{n}", "marker": 2}],
                    "claims": [{"text": "Aspirin thins blood [1].", "label": "SUPPORTED"},
                               {"text": "Statins cure all [2].", "label": "NOT_SUPPORTED"}]}
        elif n % 3 == 1:
            row |= {"answer": "Exercise helps sleep.",
                    "sources": ["https://b.org/sleep", f"https://gone.example/{n}"]}
        else:
            row |= {"answer": "Vitamin C prevents colds [1].",
                    "sources": [{"url": "https://c.org/colds", "marker": 1,
                                 "text": "vitamin c prevents colds in athletes"}],
                    "claims": [{"text": "Vitamin C prevents colds [1]."}]}
        rows.append(row)
    return rows


def _inputs() -> list[AuditInput]:
    inputs, warnings = read_audit(b"".join(json.dumps(r).encode() + b"\n" for r in _rows()))
    assert warnings == []
    return inputs


@pytest.fixture
def words(monkeypatch: pytest.MonkeyPatch) -> Config:
    """The deterministic `words` judge registered by name (a worker registers it from the
    factory the task carries); the audit's config."""
    monkeypatch.setitem(JUDGES._factories, "words", word_judge)
    return Config.load(judge="words", fetch={"offline": True}, audit={"bootstrap": 200},
                       kb_settings={"embedder": "hash"})


class PickledExecutor:
    """An executor in this process that pickles each task and chunk (as Ray must) and
    yields the chunks last first (completion order is not input order on Ray); it keeps
    the chunks it was sent."""

    name = "pickled"
    slots = 1

    def __init__(self) -> None:
        self.sent: list[list[str]] = []

    def imap(self, fn: Callable[[list[Any]], Sequence[Any]], items: Sequence[Any], *,
             chunk_size: int = 8,
             progress: Callable[[int], None] | None = None) -> Iterator[tuple[int, list[Any]]]:
        task = pickle.loads(pickle.dumps(fn))
        chunks = chunked(items, chunk_size)
        for index in reversed(range(len(chunks))):
            chunk = pickle.loads(pickle.dumps(chunks[index]))
            self.sent.append([item.answer.id for item in chunk])
            yield index, pickle.loads(pickle.dumps(list(task(chunk))))

    def map(self, fn: Any, items: Sequence[Any], **options: Any) -> list[Any]:
        raise AssertionError("the audit uses imap")

    def submit(self, fn: Any, chunk: list[Any]) -> Future[Sequence[Any]]:
        raise AssertionError("the audit uses imap")

    def close(self) -> None:
        pass


def _auditor(config: Config, out: Path, executor: Any = None, *, chunk_size: int = 3,
             fetcher: Any = None, **options: Any) -> Auditor:
    auditor = Auditor.from_config(config, out_dir=out, **options, kit=FlowKit(
        executor=executor, fetcher_factory=fetcher or StaticPages.of(PAGES)))
    auditor.chunk_size = chunk_size
    return auditor


def _run(auditor: Auditor, progress: list[tuple[int, int]] | None = None,
         ) -> tuple[list[AnswerAudit], AuditSummary]:
    if progress is not None:
        auditor.progress = lambda done, total: progress.append((done, total))
    try:
        return asyncio.run(auditor.run(_inputs()))
    finally:
        asyncio.run(auditor.aclose())


def _stable(out: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A run's outputs without what differs from run to run (ids, timings): the answers
    by id (each exactly once) and the summary."""
    lines = (out / ANSWERS_FILE).read_text("utf-8").splitlines()
    records = sorted((json.loads(line) for line in lines), key=lambda r: r["answer"]["id"])
    ids = [r["answer"]["id"] for r in records]
    assert len(ids) == len(set(ids)), f"answers written twice: {ids}"
    summary = json.loads((out / SUMMARY_FILE).read_text("utf-8"))
    for key in ("run_id", "created_at"):
        summary.pop(key, None)
    for key in ("wall_s", "resumed", "audited"):
        summary["notes"].pop(key, None)
    return records, summary


# ---- the local path is unchanged ------------------------------------------------------------


def test_local_executor_takes_the_local_path(words: Config, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _run(_auditor(words, tmp_path / "plain"))

    async def no_executor(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the local executor must not take the executor path")

    monkeypatch.setattr(Auditor, "_audit_on", no_executor)
    progress: list[tuple[int, int]] = []
    _run(_auditor(words, tmp_path / "local", LocalExecutor()), progress)
    assert _stable(tmp_path / "local") == _stable(tmp_path / "plain")
    assert len(progress) == 7 and progress[-1] == (7, 7)  # per answer, as before


def test_default_fetcher_pickles(words: Config) -> None:
    factory = default_fetcher(words)
    assert isinstance(factory, ConfigFetcher)
    assert pickle.loads(pickle.dumps(factory)) == factory
    pages = StaticPages.of(PAGES)
    assert pickle.loads(pickle.dumps(pages)) == pages


# ---- the executor path, offline ------------------------------------------------------------


def test_executor_run_equals_the_local_run(words: Config, tmp_path: Path) -> None:
    local_audits, local = _run(_auditor(words, tmp_path / "local"))
    executor = PickledExecutor()
    progress: list[tuple[int, int]] = []
    audits, summary = _run(_auditor(words, tmp_path / "pickled", executor), progress)
    assert _stable(tmp_path / "pickled") == _stable(tmp_path / "local")
    assert audits == local_audits  # input order, whatever order the chunks came back in
    assert summary.overall == local.overall and summary.notes["audited"] == 7
    assert executor.sent == [["q6"], ["q3", "q4", "q5"], ["q0", "q1", "q2"]]
    assert progress == [(1, 7), (4, 7), (7, 7)]  # answers done / total, per chunk
    assert summary.overall.n_urls > 0 and 0 < summary.overall.url_validity.value < 1
    with RunStore(words.store_path) as store:  # recorded in input order, as locally
        assert [a.answer.id for a in stored_audits(store, summary.run_id)] == [
            f"q{n}" for n in range(7)]


def test_resume_sends_only_the_answers_not_written(words: Config, tmp_path: Path) -> None:
    _run(_auditor(words, tmp_path / "whole"))
    out = tmp_path / "resumed"
    _run(_auditor(words, out, limit=3))
    executor = PickledExecutor()
    _, summary = _run(_auditor(words, out, executor))
    assert sorted(i for chunk in executor.sent for i in chunk) == ["q3", "q4", "q5", "q6"]
    assert executor.sent == [["q6"], ["q3", "q4", "q5"]]
    assert summary.notes["resumed"] == 3 and summary.notes["audited"] == 4
    assert _stable(out) == _stable(tmp_path / "whole")
    again = PickledExecutor()  # everything written: nothing is sent
    _run(_auditor(words, out, again))
    assert again.sent == []


def test_model_usage_of_the_workers_is_in_the_summary(tmp_path: Path) -> None:
    provider = ScriptedProvider(scripted_judge(keyword_rule(supported="thins")), name="chunks")
    register_fake("chunks", provider)
    try:
        config = Config.load(judge="llm", model="fake:chunks", fetch={"offline": True},
                             audit={"bootstrap": 100}, kb_settings={"embedder": "hash"},
                             llm={"cache": False})
        _, local = _run(_auditor(config, tmp_path / "local"))
        _, remote = _run(_auditor(config, tmp_path / "pickled", PickledExecutor()))
    finally:
        unregister_fake("chunks")
    assert local.usage["judge"].calls > 0
    assert remote.usage == local.usage
    assert _stable(tmp_path / "pickled") == _stable(tmp_path / "local")


def test_chunk_task_registers_the_judge_in_a_fresh_process(
        words: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    task = AuditChunk(words, fetcher_factory=StaticPages.of(PAGES), judge_factory=word_judge)
    monkeypatch.setattr(JUDGES, "_factories", dict(JUDGES._factories))
    JUDGES._factories.pop("words")
    done = task(_inputs()[:2])
    assert [a.audit.answer.id for a in done] == ["q0", "q1"] and "words" in JUDGES
    assert [c.supported for c in done[0].audit.claims] == [True, False]


# ---- Ray (slow: a local Ray with 2 CPUs) ---------------------------------------------------


@pytest.mark.slow
@needs_ray
def test_ray_run_equals_the_local_run(ray_executor: RayExecutor, words: Config,
                                      tmp_path: Path) -> None:
    local_audits, _ = _run(_auditor(words, tmp_path / "local"))
    progress: list[tuple[int, int]] = []
    audits, _ = _run(_auditor(words, tmp_path / "ray", ray_executor), progress)
    assert _stable(tmp_path / "ray") == _stable(tmp_path / "local")
    assert audits == local_audits
    done = [d for d, _ in progress]  # per chunk as it completes, in completion order
    assert [t for _, t in progress] == [7, 7, 7] and done[-1] == 7
    assert sorted(b - a for a, b in zip([0, *done], done, strict=False)) == [1, 3, 3]


@pytest.mark.slow
@needs_ray
def test_ray_redoes_the_chunk_of_a_dead_worker_and_writes_it_once(
        ray_executor: RayExecutor, words: Config, tmp_path: Path) -> None:
    marker = tmp_path / "died"
    calls = tmp_path / "calls"
    calls.mkdir()
    pages = StaticPages.of(PAGES)

    def dies_once() -> AbstractAsyncContextManager[StaticFetcher]:  # Ray pickles it by value
        (calls / f"{os.getpid()}-{len(list(calls.iterdir()))}").touch()
        try:  # the first chunk to open its fetcher, and only that one, kills its worker
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return pages()
        os._exit(1)

    _run(_auditor(words, tmp_path / "local"))
    _run(_auditor(words, tmp_path / "ray", ray_executor, fetcher=dies_once))
    assert marker.exists()
    assert len(list(calls.iterdir())) == 4  # three chunks, one of them twice
    assert _stable(tmp_path / "ray") == _stable(tmp_path / "local")


# ---- the command line ------------------------------------------------------------------------


@pytest.fixture
def cli_files(tmp_path: Path) -> tuple[Path, Path]:
    """Answers whose sources are all given texts, and a config (hash embedder, a fetch
    cache of its own, which a worker can reach too)."""
    data = tmp_path / "answers.jsonl"
    rows = []
    for row in _rows():
        sources = row["sources"]
        row["sources"] = [{"url": s if isinstance(s, str) else s["url"],
                           **({"marker": s["marker"]} if isinstance(s, dict) else {}),
                           "text": PAGES.get(s if isinstance(s, str) else s["url"], "")}
                          for s in sources]
        rows.append(json.dumps(row) + "\n")
    data.write_text("".join(rows), "utf-8")
    config = tmp_path / "config.toml"
    config.write_text('[kb_settings]\nembedder = "hash"\n[audit]\nbootstrap = 100\n'
                      f'[fetch]\ncache_path = "{tmp_path / "fetch.db"}"\n', "utf-8")
    return data, config


def _cli(data: Path, config: Path, out: Path, *extra: str) -> Any:
    return CliRunner().invoke(main, ["audit", str(data), "--out", str(out), "--offline",
                                     "--judge", "words", "--config", str(config), *extra])


def test_cli_unreachable_cluster_names_the_address(
        words: Config, cli_files: tuple[Path, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("medverify.executor._import_ray", lambda: NoRay)
    result = _cli(*cli_files, tmp_path / "out", "--executor", "ray:127.0.0.1:1")
    assert result.exit_code == 2, result.output
    assert "no Ray cluster answers at 127.0.0.1:1" in result.output
    assert not (tmp_path / "out" / ANSWERS_FILE).exists()  # failed before any work


def test_cli_without_ray_names_the_extra(words: Config, cli_files: tuple[Path, Path],
                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    result = _cli(*cli_files, tmp_path / "out", "--executor", "ray")
    assert result.exit_code == 2 and "pip install 'medverify[ray]'" in result.output
    bad = _cli(*cli_files, tmp_path / "out", "--executor", "spark")
    assert bad.exit_code == 2 and "unknown executor 'spark'" in bad.output


def test_cli_local_executor_is_the_default(words: Config, cli_files: tuple[Path, Path],
                                           tmp_path: Path) -> None:
    plain = _cli(*cli_files, tmp_path / "plain")
    local = _cli(*cli_files, tmp_path / "local", "--executor", "local")
    assert plain.exit_code == local.exit_code == 0, plain.output + local.output
    assert "auditing on" not in local.output
    assert _stable(tmp_path / "local") == _stable(tmp_path / "plain")


@pytest.mark.slow
@needs_ray
def test_cli_on_ray_writes_what_the_local_run_writes(
        ray_executor: RayExecutor, words: Config, cli_files: tuple[Path, Path],
        tmp_path: Path) -> None:
    local = _cli(*cli_files, tmp_path / "local")
    on_ray = _cli(*cli_files, tmp_path / "ray", "--executor", "ray")
    assert local.exit_code == on_ray.exit_code == 0, local.output + on_ray.output
    assert "auditing on ray" in on_ray.output
    assert _stable(tmp_path / "ray") == _stable(tmp_path / "local")


# ---- bench run: the audit of the replies on the executor -------------------------------------


def test_bench_audits_the_replies_on_the_executor(words: Config, tmp_path: Path) -> None:
    from medverify.bench.records import Question
    from medverify.bench.runner import BenchRunner

    def cite(request: Any) -> str:
        return json.dumps({"answer": "Aspirin thins blood.",
                           "sources": [{"url": "https://a.org/aspirin"},
                                       {"url": "https://dead.example/x"}]})

    questions = [Question(id=f"q{n}", text=f"Question {n}?", source="set") for n in range(5)]
    register_fake("bench-citer", ScriptedProvider(cite, name="bench-citer"))
    try:
        runs = {}
        for name, executor in (("local", None), ("pickled", PickledExecutor())):
            runner = BenchRunner.from_config(
                words, models=["fake:bench-citer"], run_dir=tmp_path / name,
                kit=FlowKit(fetcher_factory=StaticPages.of(PAGES), executor=executor, record=False))
            runner.auditor.chunk_size = 2

            async def go(runner: BenchRunner = runner) -> list[AnswerAudit]:
                async with runner:
                    replies = await runner.ask_all(questions)
                    return await runner.audit_all(questions, replies)

            runs[name] = asyncio.run(go())
            assert executor is None or len(executor.sent) == 3
    finally:
        unregister_fake("bench-citer")
    assert runs["pickled"] == runs["local"] and len(runs["local"]) == 5
    assert [c.supported for c in runs["local"][0].claims] == [True]
