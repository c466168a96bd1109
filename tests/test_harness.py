"""The run harness: one failure vocabulary, provenance, progress and cancellation for every
flow (check, factcheck and audit here; bench in test_bench_runner.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from medverify.audit.records import AuditInput
from medverify.audit.runner import Auditor
from medverify.checker import Checker
from medverify.config import Config
from medverify.decompose.answer import cap_claims, decompose_answer
from medverify.errors import InputError
from medverify.factcheck.loop import FactChecker
from medverify.harness import (
    CancelToken,
    Provenance,
    Resources,
    RunCancelled,
    RunHarness,
    prompt_versions,
    run_each,
    stage_id,
    status_for,
)
from medverify.kb import KnowledgeBase
from medverify.kb.embed_base import HashEmbedder
from medverify.kit import FlowKit
from medverify.llm.facade import Model
from medverify.records import Answer, Claim, Document, RunStatus, Span
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider
from medverify.testing.judge import WordJudge, keyword_rule, scripted_judge

DOCS = [Document(doc_id="m", title="Metformin",
                 text="Metformin is a first-line medicine for type 2 diabetes.")]
ANSWERS = [Answer(text=f"Metformin is a first-line medicine, case {i}.", question="q")
           for i in range(4)]


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as base:
        base.ingest(DOCS)
        yield base


class Buggy:
    """A decomposer with a bug: it raises something that is not a MedverifyError."""

    name = "buggy"
    prompt_version = None

    async def decompose(self, answer: Answer) -> list[Claim]:
        raise RuntimeError("boom")


class Cancelling:
    """Splits nothing out (one claim: the whole answer) and sets the token on first use."""

    name = "rules"
    prompt_version = None

    def __init__(self, token: CancelToken) -> None:
        self.token = token
        self.calls = 0

    async def decompose(self, answer: Answer) -> list[Claim]:
        self.calls += 1
        self.token.cancel("stopped by the test")
        return [Claim(id="c1", text=answer.text, span=Span(start=0, end=len(answer.text)))]


def _checker(kb: KnowledgeBase) -> Checker:
    provider = ScriptedProvider(scripted_judge(keyword_rule(supported="first-line")))
    return Checker.from_config(
        Config(model="fake:x", decomposer="rules"), kit=FlowKit(kb=kb, model=Model(provider)))


def _only_run(path: Path) -> Any:
    with RunStore(path) as store:
        [info] = store.list_runs()
    return info


# ----------------------------------------------------------------------- the vocabulary


def test_status_for_names_each_way_a_run_can_stop() -> None:
    assert status_for(RunCancelled("x")) is RunStatus.CANCELLED
    assert status_for(RuntimeError("x")) is RunStatus.FAILED
    assert status_for(InputError("x")) is RunStatus.FAILED
    assert status_for(KeyboardInterrupt()) is RunStatus.INTERRUPTED
    assert status_for(asyncio.CancelledError()) is RunStatus.INTERRUPTED


def test_a_bug_in_a_check_run_is_recorded_as_failed_with_its_cause(
        kb: KnowledgeBase, tmp_path: Path) -> None:
    checker = _checker(kb)
    checker.decomposer = Buggy()  # type: ignore[assignment]
    with RunStore(tmp_path / "runs.db") as store, pytest.raises(RuntimeError):
        asyncio.run(checker.run(ANSWERS[:1], store=store))
    info = _only_run(tmp_path / "runs.db")
    assert (info.kind, info.status, info.error) == ("check", "failed", "RuntimeError: boom")


def test_a_bug_in_a_factcheck_run_is_recorded_the_same_way(
        kb: KnowledgeBase, tmp_path: Path) -> None:
    checker = FactChecker.from_config(Config(), kit=FlowKit(kb=kb, judge=WordJudge()))
    checker.decomposer = Buggy()  # type: ignore[assignment]
    with RunStore(tmp_path / "runs.db") as store, pytest.raises(RuntimeError):
        asyncio.run(checker.run(ANSWERS[:1], store=store))
    info = _only_run(tmp_path / "runs.db")
    assert (info.kind, info.status, info.error) == ("factcheck", "failed", "RuntimeError: boom")


def test_a_bug_in_an_audit_run_is_recorded_the_same_way(tmp_path: Path) -> None:
    @asynccontextmanager
    async def broken_fetcher() -> Any:
        raise RuntimeError("no fetcher")
        yield  # pragma: no cover

    config = Config.load(fetch={"offline": True}, audit={"bootstrap": 50},
                         store=tmp_path / "runs.db")
    auditor = Auditor.from_config(
        config, out_dir=tmp_path / "out",
        kit=FlowKit(judge=WordJudge(), embedder=HashEmbedder(), fetcher_factory=broken_fetcher))
    with pytest.raises(RuntimeError):
        asyncio.run(auditor.run([AuditInput(answer=ANSWERS[0])]))
    info = _only_run(tmp_path / "runs.db")
    assert (info.kind, info.status, info.error) == ("audit", "failed", "RuntimeError: no fetcher")


def test_answers_with_no_result_end_the_run_as_error_not_done(
        kb: KnowledgeBase, tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.db") as store:
        reports = asyncio.run(_checker(kb).run([Answer(text="   "), ANSWERS[0]], store=store))
    assert [bool(r.results) for r in reports] == [False, True]
    info = _only_run(tmp_path / "runs.db")
    assert (info.status, info.error) == ("error", "1 of 2 answers produced no result")


# ----------------------------------------------------------------------- cancellation


def test_a_cancelled_check_starts_no_new_answer_and_is_recorded_as_cancelled(
        kb: KnowledgeBase, tmp_path: Path) -> None:
    token = CancelToken()
    checker = _checker(kb)
    decomposer = Cancelling(token)
    checker.decomposer = decomposer  # type: ignore[assignment]
    with RunStore(tmp_path / "runs.db") as store, pytest.raises(RunCancelled):
        asyncio.run(checker.run(ANSWERS, store=store, concurrency=1, cancel=token))
    assert decomposer.calls == 1
    info = _only_run(tmp_path / "runs.db")
    assert (info.status, info.error) == ("cancelled", "RunCancelled: stopped by the test")
    with RunStore(tmp_path / "runs.db") as store:
        assert len(store.reports(info.id)) == 1  # the answer that ran is kept


def test_run_each_keeps_input_order_counts_progress_and_cancels_siblings() -> None:
    seen: list[tuple[int, int]] = []

    async def work(position: int, item: float) -> int:
        await asyncio.sleep(item)
        return position

    out = asyncio.run(run_each([0.03, 0.0, 0.01], work, concurrency=2,
                               progress=lambda d, t: seen.append((d, t)), done=5, total=8))
    assert out == [0, 1, 2] and seen == [(6, 8), (7, 8), (8, 8)]

    finished: list[int] = []

    async def failing(position: int, item: float) -> None:
        if position == 0:
            raise ValueError("first fails")
        await asyncio.sleep(item)
        finished.append(position)

    with pytest.raises(ValueError):
        asyncio.run(run_each([0.0, 0.2, 0.2], failing, concurrency=3))
    assert finished == []  # the siblings were cancelled, not left running


# ----------------------------------------------------------------------- the pieces


def test_provenance_helpers() -> None:
    class Judge:
        name, prompt_version, judge_id = "llm", "judge/v1", "llm:fake:x"

    class Rules:
        name, prompt_version = "rules", None

    assert stage_id(Judge()) == "llm:fake:x" and stage_id(Rules()) == "rules"
    assert prompt_versions({"judge": Judge(), "decompose": Rules(), "trace": "trace/v1",
                            "cleanup": None}) == {"judge": "judge/v1", "trace": "trace/v1"}


def test_harness_without_a_store_records_nothing_but_can_still_name_the_run() -> None:
    plain = RunHarness("check", Config())
    assert plain.start(Provenance({}, {})) is None
    named = RunHarness("audit", Config(), always_id=True)
    assert named.start(Provenance({}, {})) and named.run_id


def test_resources_close_only_what_they_opened(kb: KnowledgeBase) -> None:
    model = Model(ScriptedProvider(["{}"]))
    given = Resources.open(Config(model="fake:x"), kb=kb, model=model)
    assert given.owned == () and given.ledger is model.usage
    asyncio.run(given.aclose())
    assert kb.snapshot_id  # still open


def test_decompose_answer_validates_and_caps_with_the_flow_words() -> None:
    class Three:
        name, prompt_version = "three", None

        async def decompose(self, answer: Answer) -> list[Claim]:
            return [Claim(id=f"c{i}", text=f"claim {i}") for i in range(3)]

    config = Config(max_claims=2)
    claims, errors = asyncio.run(decompose_answer(Answer(text="x"), Three(), config,
                                                  noun="fact"))
    assert len(claims) == 2
    assert errors == ["decompose: 3 facts, only the first 2 were checked (max_claims)"]
    claims, errors = asyncio.run(decompose_answer(Answer(text=" "), Three(), config))
    assert claims == [] and errors == ["decompose: the answer is empty: nothing to check"]
    kept, capped = cap_claims([Claim(id="a", text="a")], 2)
    assert len(kept) == 1 and capped == []
