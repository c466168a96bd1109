"""The benchmark runner: asking, resuming, auditing, the manifest, the run store."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import types
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from medverify.audit.records import AnswerAudit
from medverify.bench.layout import RunLayout
from medverify.bench.records import (
    BenchManifest,
    BenchSummary,
    ModelEntry,
    ModelReply,
    Question,
    ReplyStatus,
)
from medverify.bench.runner import BenchRunner, audit_input, parse_models, questions_sha256
from medverify.bench.store import bench_replies
from medverify.config import Config
from medverify.errors import ConfigError, InputError, ProviderError
from medverify.files import read_records
from medverify.kb.embed_base import HashEmbedder
from medverify.kit import FlowKit
from medverify.llm.base import ChatRequest
from medverify.records import Source
from medverify.sources.factory import Fetcher, FetcherFactory
from medverify.store.runs import RunStore, migrations
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.fake_provider import Reply
from medverify.testing.judge import WordJudge

TOPICS = {"q1": "aspirin", "q2": "statins", "q3": "insulin"}
QUESTIONS = [
    Question(id="q1", text="What does aspirin do?", source="setA"),
    Question(id="q2", text="What do statins do?", source="setA"),
    Question(id="q3", text="What does insulin do?", source="setB"),
]
PAGES = {f"https://good.org/{t}": f"{t} works well in most adults" for t in TOPICS.values()}


class DictFetcher:
    """Sources' text from a dict of pages; any other URL is a dead link."""

    def __init__(self, pages: dict[str, str]) -> None:
        self.pages = pages
        self.fetched: list[str] = []

    async def fetch_all(self, sources: Sequence[Source]) -> list[Source]:
        self.fetched.extend(s.url or "" for s in sources)
        return [self._one(s) for s in sources]

    def _one(self, source: Source) -> Source:
        text = self.pages.get(source.url or "")
        if text is None:
            return source.model_copy(update={"status": "invalid", "reason": "HTTP 404"})
        return source.model_copy(update={"status": "fetched", "text": text})


def _fetcher_factory(fetcher: DictFetcher) -> FetcherFactory:
    @asynccontextmanager
    async def make() -> AsyncIterator[Fetcher]:
        yield fetcher

    return make


def _topic(request: ChatRequest) -> tuple[str, str]:
    text = request.messages[-1].content
    qid = next(q.id for q in QUESTIONS if q.text in text)
    return qid, TOPICS[qid]


def good_model(request: ChatRequest) -> str:
    """Valid JSON citing the page that supports its answer."""
    _, topic = _topic(request)
    return json.dumps({"answer": f"{topic.capitalize()} works well.",
                       "sources": [{"url": f"https://good.org/{topic}", "title": topic}]})


def sloppy_model(request: ChatRequest) -> str:
    """Prose with a dead URL for q1, a refusal for q2, nothing for q3."""
    qid, topic = _topic(request)
    if qid == "q1":
        return f"{topic.capitalize()} works well. See https://dead.example/{topic}"
    if qid == "q2":
        return "I can't provide medical advice."
    return ""


class Models:
    """Registered fake models under test; ``asked`` lists (name, question id) calls."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.asked: list[tuple[str, str]] = []
        self.providers: dict[str, ScriptedProvider] = {}

    def add(self, name: str, reply: Callable[[ChatRequest], Reply], delay_s: float = 0.0) -> str:
        def answer(request: ChatRequest) -> Reply:
            self.asked.append((name, _topic(request)[0]))
            return reply(request)

        provider = ScriptedProvider(answer, name=name, delay_s=delay_s)
        self.providers[name] = register_fake(name, provider)
        self.names.append(name)
        return f"fake:{name}"

    def requests(self) -> int:
        return sum(len(p.requests) for p in self.providers.values())


@pytest.fixture
def models() -> Iterator[Models]:
    found = Models()
    yield found
    for name in found.names:
        unregister_fake(name)


def _config(**bench: object) -> Config:
    return Config.load(fetch={"offline": True}, audit={"bootstrap": 200},
                       llm={"max_retries": 0, "backoff_s": 0}, bench={"concurrency": 2, **bench})


def _runner(tmp_path: Path, specs: Sequence[str | ModelEntry], **options: object) -> BenchRunner:
    fetcher = DictFetcher(PAGES)
    kit = FlowKit(judge=WordJudge(), embedder=HashEmbedder(),
                  fetcher_factory=_fetcher_factory(fetcher))
    return BenchRunner.from_config(_config(), models=specs, run_dir=tmp_path / "run", kit=kit,
                                   **options)  # type: ignore[arg-type]


def _ask(runner: BenchRunner, questions: Sequence[Question] = QUESTIONS) -> list[ModelReply]:
    async def go() -> list[ModelReply]:
        async with runner:
            return await runner.ask_all(questions)

    return asyncio.run(go())


def _ask_and_audit(runner: BenchRunner) -> tuple[list[ModelReply], list[AnswerAudit]]:
    async def go() -> tuple[list[ModelReply], list[AnswerAudit]]:
        async with runner:
            replies = await runner.ask_all(QUESTIONS)
            return replies, await runner.audit_all(QUESTIONS, replies)

    return asyncio.run(go())


def _saved_replies(tmp_path: Path) -> list[ModelReply]:
    return read_records(RunLayout(tmp_path / "run").replies, ModelReply, key=lambda r: r.key)


# -- models ------------------------------------------------------------------------------


def test_model_labels_and_specs() -> None:
    entries = parse_models(["fake:a", "b=fake:b", "openai:gpt-4o?timeout=5",
                            ModelEntry(label="c", spec="fake:c")])
    assert [(e.label, e.spec) for e in entries] == [
        ("fake:a", "fake:a"), ("b", "fake:b"),
        ("openai:gpt-4o?timeout=5", "openai:gpt-4o?timeout=5"), ("c", "fake:c")]
    with pytest.raises(ConfigError, match="unique; repeated: x"):
        parse_models(["x=fake:a", "x=fake:b"])
    with pytest.raises(ConfigError, match="LABEL=SPEC"):
        parse_models(["x="])
    with pytest.raises(ConfigError, match="'::'"):
        parse_models(["fake:a::b"])
    with pytest.raises(ConfigError):
        parse_models(["no-provider-here"])
    with pytest.raises(ConfigError, match="at least one"):
        parse_models([])


# -- asking ------------------------------------------------------------------------------


def test_every_model_answers_every_question(tmp_path: Path, models: Models) -> None:
    specs = [f"good={models.add('good', good_model)}", models.add("sloppy", sloppy_model)]
    seen: list[tuple[str, int, int]] = []
    runner = _runner(tmp_path, specs)
    runner.on_ask = lambda label, done, total: seen.append((label, done, total))
    replies = _ask(runner)
    assert [(r.model, r.question_id) for r in replies] == [
        (m, q.id) for m in ("good", "fake:sloppy") for q in QUESTIONS]
    assert [r.status for r in replies] == [ReplyStatus.OK] * 3 + [
        ReplyStatus.FALLBACK, ReplyStatus.REFUSAL, ReplyStatus.EMPTY]
    assert sorted(r.key for r in _saved_replies(tmp_path)) == sorted(r.key for r in replies)
    assert ("good", 3, 3) in seen and ("fake:sloppy", 0, 3) in seen
    assert runner.timing["ask_s"] >= runner.timing["model_busy_s"] > 0
    assert runner.counts == {"replies_resumed": 0, "replies_asked": 6}
    manifest = BenchManifest.model_validate_json((tmp_path / "run" / "run.json").read_text())
    assert [m.label for m in manifest.models] == ["good", "fake:sloppy"]
    assert manifest.n_questions == 3 and manifest.questions_sha256 == questions_sha256(QUESTIONS)
    assert manifest.prompt_versions["bench_answer"] == "bench_answer/v1"
    assert manifest.judge == "words" and manifest.config["bench"]["concurrency"] == 2
    saved = read_records(RunLayout(tmp_path / "run").questions, Question)
    assert saved == QUESTIONS


def test_a_rerun_makes_no_new_call(tmp_path: Path, models: Models) -> None:
    specs = [models.add("good", good_model), models.add("sloppy", sloppy_model)]
    _ask_and_audit(_runner(tmp_path, specs))
    calls = models.requests()
    runner = _runner(tmp_path, specs)
    replies, audits = _ask_and_audit(runner)
    assert models.requests() == calls and len(replies) == 6 and len(audits) == 6
    assert runner.counts["replies_resumed"] == 6 and runner.counts["replies_asked"] == 0


def test_fresh_starts_over_and_the_request_cache_makes_it_free(tmp_path: Path,
                                                               models: Models) -> None:
    specs = [models.add("good", good_model)]
    _ask_and_audit(_runner(tmp_path, specs))
    calls = models.requests()
    runner = _runner(tmp_path, specs, fresh=True)
    replies = _ask(runner)
    assert runner.counts["replies_resumed"] == 0 and len(replies) == 3
    assert models.requests() == calls  # every request answered by the request cache
    assert all(r.attempts[0].cached for r in replies)
    assert not (tmp_path / "run" / "audit").exists()


def test_an_interrupted_run_resumes_with_the_missing_pairs(tmp_path: Path,
                                                           models: Models) -> None:
    calls = {"n": 0}

    def stops(request: ChatRequest) -> str:
        calls["n"] += 1
        if calls["n"] == 2:
            raise asyncio.CancelledError  # like Ctrl-C in the middle of the run
        return good_model(request)

    specs = [models.add("good", good_model), models.add("stops", stops)]
    with pytest.raises(asyncio.CancelledError):
        _ask(_runner(tmp_path, specs))
    finished = {r.key for r in _saved_replies(tmp_path)}
    assert 0 < len(finished) < 6
    models.asked.clear()
    replies = _ask(_runner(tmp_path, specs))
    asked = {(f"fake:{name}", qid) for name, qid in models.asked}
    every = {(f"fake:{m}", q.id) for m in ("good", "stops") for q in QUESTIONS}
    assert asked == every - finished
    assert len(replies) == 6 and all(r.status == ReplyStatus.OK for r in replies)


def test_at_most_concurrency_questions_per_model_in_flight(tmp_path: Path,
                                                           models: Models) -> None:
    specs = [models.add("slow", good_model, delay_s=0.03), models.add("slow2", good_model,
                                                                      delay_s=0.03)]
    _ask(_runner(tmp_path, specs))  # bench.concurrency = 2
    assert [p.max_in_flight for p in models.providers.values()] == [2, 2]


def test_limit_then_the_whole_set(tmp_path: Path, models: Models) -> None:
    specs = [models.add("good", good_model)]
    assert [r.question_id for r in _ask(_runner(tmp_path, specs, limit=1))] == ["q1"]
    models.asked.clear()
    replies = _ask(_runner(tmp_path, specs))
    assert sorted(models.asked) == [("good", "q2"), ("good", "q3")] and len(replies) == 3


def test_error_replies_are_asked_again_on_the_next_run(tmp_path: Path, models: Models) -> None:
    failures = {"q2": 1}

    def flaky(request: ChatRequest) -> str:
        qid, _ = _topic(request)
        if failures.get(qid):
            failures[qid] -= 1
            raise ProviderError("service unavailable", status=400)
        return good_model(request)

    specs = [models.add("flaky", flaky)]
    replies, audits = _ask_and_audit(_runner(tmp_path, specs))
    assert [r.status for r in replies] == [ReplyStatus.OK, ReplyStatus.ERROR, ReplyStatus.OK]
    assert audits[1].claims == [] and audits[1].answer.meta["reply_status"] == "error"
    models.asked.clear()
    runner = _runner(tmp_path, specs)
    replies, audits = _ask_and_audit(runner)
    assert models.asked == [("flaky", "q2")]
    assert [r.status for r in replies] == [ReplyStatus.OK] * 3
    assert audits[1].answer.meta["reply_status"] == "ok" and audits[1].claims
    assert runner.counts["audits_redone"] == 1
    assert len(_saved_replies(tmp_path)) == 3  # the last reply per pair wins


# -- auditing ----------------------------------------------------------------------------


def test_the_replies_are_audited(tmp_path: Path, models: Models) -> None:
    specs = [models.add("good", good_model), models.add("sloppy", sloppy_model)]
    runner = _runner(tmp_path, specs)
    progress: list[tuple[int, int]] = []
    runner.auditor.progress = lambda done, total: progress.append((done, total))
    _, audits = _ask_and_audit(runner)
    by_id = {a.answer.id: a for a in audits}
    good = by_id["fake:good::q1"]
    assert good.answer.meta == {"model": "fake:good", "question_source": "setA",
                                "question_id": "q1", "reply_status": "ok"}
    assert good.answer.question == "What does aspirin do?"
    assert good.metrics.n_valid_urls == 1 and all(c.supported for c in good.claims)
    fallback = by_id["fake:sloppy::q1"]
    assert fallback.metrics.n_urls == 1 and fallback.metrics.n_valid_urls == 0
    assert by_id["fake:sloppy::q2"].claims == [] and by_id["fake:sloppy::q3"].claims == []
    lines = RunLayout(tmp_path / "run").audit_answers.read_text("utf-8").splitlines()
    assert len(lines) == 6 and progress[-1] == (6, 6)
    assert runner.timing["audit_s"] > 0


def test_audit_input_of_a_refusal_has_no_claims() -> None:
    reply = ModelReply(question_id="q1", model="m", spec="fake:m", status=ReplyStatus.REFUSAL,
                       answer="I can't provide medical advice.")
    item = audit_input(reply, QUESTIONS[0])
    assert item.claims == [] and item.answer.id == "m::q1"
    ok = reply.model_copy(update={"status": ReplyStatus.OK})
    assert audit_input(ok, QUESTIONS[0]).claims is None


# -- the manifest ------------------------------------------------------------------------


def test_resuming_with_other_questions_or_models_is_refused(tmp_path: Path,
                                                            models: Models) -> None:
    good = models.add("good", good_model)
    other = models.add("other", good_model)
    _ask(_runner(tmp_path, [good]))
    with pytest.raises(ConfigError, match=r"other questions.*--fresh"):
        _ask(_runner(tmp_path, [good]), QUESTIONS[:2])
    with pytest.raises(ConfigError, match="models fake:good, not fake:good, fake:other"):
        _ask(_runner(tmp_path, [good, other]))
    replies = _ask(_runner(tmp_path, [good, other], fresh=True), QUESTIONS[:2])
    assert len(replies) == 4 and len(_saved_replies(tmp_path)) == 4


def test_resuming_with_another_judge_is_refused(tmp_path: Path, models: Models) -> None:
    class OtherJudge(WordJudge):
        name = "other-words"

    good = models.add("good", good_model)
    _ask(_runner(tmp_path, [good]))
    runner = BenchRunner.from_config(
        _config(), models=[good], run_dir=tmp_path / "run",
        kit=FlowKit(judge=OtherJudge(), embedder=HashEmbedder(),
                    fetcher_factory=_fetcher_factory(DictFetcher(PAGES))))
    with pytest.raises(ConfigError, match=r"judged by words, not other-words.*--fresh"):
        _ask(runner)


def test_bad_question_sets(tmp_path: Path, models: Models) -> None:
    runner = _runner(tmp_path, [models.add("good", good_model)])
    with pytest.raises(InputError, match="repeated: q1"):
        runner.prepare([QUESTIONS[0], QUESTIONS[0]])
    with pytest.raises(InputError, match="no questions"):
        runner.prepare([])


def test_an_unreadable_manifest(tmp_path: Path, models: Models) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{", "utf-8")
    with pytest.raises(ConfigError, match="not a readable run manifest"):
        _runner(tmp_path, [models.add("good", good_model)]).prepare(QUESTIONS)


# -- the whole run and the run store ------------------------------------------------------


def _fake_summary(monkeypatch: pytest.MonkeyPatch) -> list[RunLayout]:
    """Stand in for medverify.bench.summary (written separately) to test run() alone."""
    calls: list[RunLayout] = []

    def finish_run(layout: RunLayout, config: Config) -> BenchSummary:
        calls.append(layout)
        manifest = BenchManifest.model_validate_json(layout.manifest.read_text("utf-8"))
        return BenchSummary(run_id=manifest.run_id, models=manifest.models)

    module = types.ModuleType("medverify.bench.summary")
    module.finish_run = finish_run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "medverify.bench.summary", module)
    return calls


def test_run_records_the_study(tmp_path: Path, models: Models,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_summary(monkeypatch)
    specs = [models.add("good", good_model), models.add("sloppy", sloppy_model)]
    runner = _runner(tmp_path, specs)

    async def go() -> BenchSummary:
        async with runner:
            return await runner.run(QUESTIONS, questions_path="questions.jsonl")

    summary = asyncio.run(go())
    layout = RunLayout(tmp_path / "run")
    assert calls == [layout] and len(summary.models) == 2
    timing = json.loads((layout.root / "timing.json").read_text("utf-8"))
    for key in ("ask_s", "audit_s", "summary_s", "total_s", "model_busy_s"):
        assert timing[key] == runner.timing[key] >= 0
    assert timing["total_s"] >= timing["ask_s"] + timing["audit_s"]
    assert timing["replies_asked"] == 6
    with RunStore(runner.config.store_path) as store:
        bench = [r for r in store.list_runs() if r.kind == "bench"]
        assert [r.status for r in bench] == ["done"]
        stored = bench_replies(store, bench[0].id)
        assert bench[0].n_answers == len(stored) == 6  # `runs list` counts the replies
        assert bench[0].models["answer:fake:good"] == "fake:good"
        assert bench[0].prompt_versions["bench_answer"] == "bench_answer/v1"
        assert "bench_answer:fake:good" in bench[0].usage
        assert {r.kind for r in store.list_runs()} == {"bench", "audit"}
    assert sorted(r.key for r in stored) == sorted(r.key for r in _saved_replies(tmp_path))
    manifest = BenchManifest.model_validate_json(layout.manifest.read_text("utf-8"))
    assert manifest.questions_path == "questions.jsonl"


def test_an_interrupted_run_is_recorded_as_such(tmp_path: Path, models: Models,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_summary(monkeypatch)

    def stops(request: ChatRequest) -> str:
        raise asyncio.CancelledError

    runner = _runner(tmp_path, [models.add("stops", stops)])
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(runner.run(QUESTIONS))
    with RunStore(runner.config.store_path) as store:
        [info] = store.list_runs()
    assert info.kind == "bench" and info.status == "interrupted"


def test_a_failing_study_is_recorded_as_failed_like_every_flow(
        tmp_path: Path, models: Models, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_summary(monkeypatch)
    runner = _runner(tmp_path, [models.add("good", good_model)])

    async def broken(*args: object) -> None:
        raise RuntimeError("audit broke")

    monkeypatch.setattr(runner, "audit_all", broken)
    with pytest.raises(RuntimeError):
        asyncio.run(runner.run(QUESTIONS))
    with RunStore(runner.config.store_path) as store:
        [info] = store.list_runs()
    assert (info.kind, info.status, info.error) == ("bench", "failed", "RuntimeError: audit broke")


def test_the_whole_study_with_its_summary(tmp_path: Path, models: Models) -> None:
    """End to end with medverify.bench.summary.finish_run (written by another helper)."""
    specs = [models.add("good", good_model), models.add("sloppy", sloppy_model)]
    runner = _runner(tmp_path, specs)

    async def go() -> BenchSummary:
        async with runner:
            return await runner.run(QUESTIONS)

    summary = asyncio.run(go())
    layout = RunLayout(tmp_path / "run")
    assert layout.summary.is_file() and layout.report.is_file()
    assert set(summary.overall) == {"fake:good", "fake:sloppy"}
    assert summary.overall["fake:good"].n_answers == 3
    assert summary.replies["fake:sloppy"].statuses["refusal"] == 1
    calls = models.requests()
    asyncio.run(_runner(tmp_path, specs).run(QUESTIONS))
    assert models.requests() == calls


def test_a_version_3_store_gains_the_bench_table(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    db = sqlite3.connect(path)
    for version, sql in migrations()[:3]:
        db.executescript(sql + f"\nPRAGMA user_version = {version};")
    db.execute("INSERT INTO runs VALUES ('r1', 'audit', 'done', '2026-01-01T00:00:00+00:00',"
               " NULL, '0.1.0', '{}', '{}', '{}', NULL, '{}', NULL)")
    db.commit()
    db.close()
    reply = ModelReply(question_id="q1", model="m", spec="fake:m", status=ReplyStatus.OK,
                       answer="Yes.", sources=[Source(id="1", url="https://a.org/")])
    with RunStore(path) as store:
        assert store.schema_version >= 4
        assert store.get_run("r1").kind == "audit"
        run_id = store.start_run(kind="bench", config={}, models={}, prompt_versions={},
                                 kb_snapshot=None)
        store.save_bench_reply(run_id, reply)
        store.save_bench_reply(run_id, reply.model_copy(update={"answer": "Yes!"}))
        assert bench_replies(store, run_id[:15]) == [reply.model_copy(update={"answer": "Yes!"})]


# --- issue 13: a resumed study whose sources changed says so --------------------------


def shared_page_model(request: ChatRequest) -> str:
    """Every answer cites the same page (as the offline example's models do)."""
    _, topic = _topic(request)
    return json.dumps({"answer": f"{topic.capitalize()} works well in most adults.",
                       "sources": [{"url": "https://good.org/shared", "title": "shared"}]})


def test_resumed_study_reports_sources_whose_fetch_outcome_changed(
        tmp_path: Path, models: Models) -> None:
    spec = models.add("shared", shared_page_model)
    pages = {"https://good.org/shared": "aspirin statins insulin works well in most adults"}
    fetcher = DictFetcher(pages)

    def runner(limit: int | None) -> BenchRunner:
        return BenchRunner.from_config(
            _config(), models=[spec], run_dir=tmp_path / "run", limit=limit,
            kit=FlowKit(judge=WordJudge(), embedder=HashEmbedder(),
                        fetcher_factory=_fetcher_factory(fetcher)))

    async def run(limit: int | None) -> BenchSummary:
        async with runner(limit) as bench:
            return await bench.run(QUESTIONS)

    first = asyncio.run(run(1))
    assert "fetch_changes" not in first.notes and "run_warnings" not in first.notes
    pages.clear()  # the page is gone on resume (e.g. served on another port now)
    summary = asyncio.run(run(None))
    changes = summary.notes["fetch_changes"]
    assert [c["url"] for c in changes] == ["https://good.org/shared"]
    assert changes[0]["kind"] == "validity"
    outcomes = {o["outcome"]: o["n_answers"] for o in changes[0]["outcomes"]}
    assert outcomes == {"fetched": 1, "unknown": 2}
    assert any("different fetch outcome" in w for w in summary.notes["run_warnings"])
    html = (tmp_path / "run" / "report.html").read_text("utf-8")
    assert 'id="run-warnings"' in html and "https://good.org/shared" in html
