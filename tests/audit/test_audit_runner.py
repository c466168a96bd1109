"""The audit runner: outputs, resume after a crash, per-answer failures, the run store."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from medverify.audit.inputs import read_audit
from medverify.audit.metrics import audit_metrics
from medverify.audit.records import AnswerAudit, AuditInput, AuditSummary
from medverify.audit.runner import Auditor, load_done
from medverify.audit.store import audits as stored_audits
from medverify.config import Config
from medverify.errors import ConfigError
from medverify.kb.embed_base import HashEmbedder
from medverify.kit import FlowKit
from medverify.records import Answer, Claim, FetchFailure, Source, content_hash
from medverify.sources.factory import Fetcher, FetcherFactory
from medverify.store.runs import RunStore
from medverify.testing.judge import WordJudge


class FailingDecomposer:
    name = "failing"
    prompt_version = None

    async def decompose(self, answer: Answer) -> list[Claim]:
        raise RuntimeError("decomposer crashed")


def _lines() -> bytes:
    rows = [
        {"id": "q1", "system": "A", "answer": "Aspirin thins blood [1]. Statins cure all [2].",
         "sources": [{"url": "https://a.org/1", "marker": 1, "text": "aspirin thins blood"},
                     {"url": "https://dead.example/2", "marker": 2}],
         "claims": [{"text": "Aspirin thins blood [1].", "label": "SUPPORTED"},
                    {"text": "Statins cure all [2].", "label": "NOT_SUPPORTED"}]},
        {"id": "q2", "system": "B", "answer": "Exercise helps sleep.",
         "sources": [{"url": "https://b.org", "text": "exercise helps sleep quality"}]},
        {"id": "q3", "system": "B", "answer": "Vitamin C prevents colds [1].",
         "sources": [{"url": "https://c.org", "text": "vitamin c does not prevent colds"}],
         "claims": [{"text": "Vitamin C prevents colds [1]."}]},
    ]
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def _inputs() -> list[AuditInput]:
    inputs, warnings = read_audit(_lines())
    assert warnings == []
    return inputs


def _auditor(tmp_path: Path, judge: WordJudge | None = None, **options: object) -> Auditor:
    config = Config.load(fetch={"offline": True}, audit={"bootstrap": 200})
    parts = {k: options.pop(k) for k in ("fetcher_factory", "record") if k in options}
    kit = FlowKit(judge=judge or WordJudge(), embedder=HashEmbedder(),
                  **parts)  # type: ignore[arg-type]
    return Auditor.from_config(config, out_dir=tmp_path / "out", kit=kit,
                               **options)  # type: ignore[arg-type]


def _run(auditor: Auditor) -> tuple[list[AnswerAudit], AuditSummary]:
    return asyncio.run(auditor.run(_inputs()))


def test_run_writes_outputs_and_metrics(tmp_path: Path) -> None:
    audits, summary = _run(_auditor(tmp_path))
    out = tmp_path / "out"
    assert [a.answer.id for a in audits] == ["q1", "q2", "q3"]
    first = audits[0]
    assert [c.supported for c in first.claims] == [True, False]
    assert first.answer.sources[1].status == "invalid"  # offline, never fetched
    assert first.metrics.n_urls == 2 and first.metrics.n_valid_urls == 1
    assert [c.claim.decomposer for c in audits[1].claims] == ["rules"]  # decomposed
    assert audits[1].claims[0].supported is True
    assert audits[2].claims[0].supported is False
    lines = (out / "answers.jsonl").read_text("utf-8").splitlines()
    assert sorted(AnswerAudit.model_validate_json(x).answer.id for x in lines) == ["q1", "q2", "q3"]
    saved = AuditSummary.model_validate_json((out / "summary.json").read_text("utf-8"))
    assert saved.overall.n_answers == 3 and saved.overall.n_claims == 4
    assert saved.overall.statement_support.value == pytest.approx(0.5)
    assert saved.overall.url_validity.value == pytest.approx(3 / 4)
    assert "wayback: offline" in saved.skipped and saved.offline is True
    assert set(saved.breakdowns["system"]) == {"A", "B"}
    assert saved.notes["pairs_judged"] == 4 and saved.notes["audited"] == 3
    assert saved.judge == "words" and saved.models["embedder"] == "hash-256"
    assert (out / "report.html").read_text("utf-8").startswith("<!")
    assert summary.run_id == saved.run_id


def test_summary_is_recomputable_from_the_run_store(tmp_path: Path) -> None:
    auditor = _auditor(tmp_path)
    _, summary = _run(auditor)
    with RunStore(auditor.config.store_path) as store:
        info = store.get_run(summary.run_id)
        stored = stored_audits(store, summary.run_id)
    assert (info.kind, info.status, info.n_answers, info.n_claims) == ("audit", "done", 3, 4)
    assert [a.answer.id for a in stored] == ["q1", "q2", "q3"]
    again = audit_metrics(stored, n_boot=200, seed=0)
    assert again == summary.overall


def test_resume_skips_done_answers_and_drops_a_truncated_line(tmp_path: Path) -> None:
    _run(_auditor(tmp_path))
    path = tmp_path / "out" / "answers.jsonl"
    by_id = {AnswerAudit.model_validate_json(x).answer.id: x for x in path.read_text().splitlines()}
    path.write_text(by_id["q1"] + "\n" + by_id["q2"][: len(by_id["q2"]) // 2], "utf-8")
    judge = WordJudge()
    auditor = _auditor(tmp_path, judge)
    audits, summary = _run(auditor)
    assert judge.items and all("prevents colds" in i.claim.text or "Exercise" in i.claim.text
                           for i in judge.items)
    assert summary.notes["resumed"] == 1 and summary.notes["audited"] == 2
    assert any("1 unreadable line" in w for w in summary.notes["warnings"])
    ids = [AnswerAudit.model_validate_json(x).answer.id for x in path.read_text().splitlines()]
    assert sorted(ids) == ["q1", "q2", "q3"]
    assert [a.answer.id for a in audits] == ["q1", "q2", "q3"]


def test_fresh_redoes_everything(tmp_path: Path) -> None:
    _run(_auditor(tmp_path))
    judge = WordJudge()
    _, summary = _run(_auditor(tmp_path, judge, fresh=True))
    assert summary.notes["resumed"] == 0 and len(judge.items) == 4
    assert len((tmp_path / "out" / "answers.jsonl").read_text().splitlines()) == 3


def test_a_failing_answer_is_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    auditor = _auditor(tmp_path)
    auditor.decomposer = FailingDecomposer()
    audits, summary = _run(auditor)
    failed = audits[1]
    assert failed.claims == [] and failed.errors == ["RuntimeError: decomposer crashed"]
    assert [c.supported for c in audits[0].claims] == [True, False]
    assert any("q2: RuntimeError" in e for e in summary.errors)


def test_limit_audits_the_first_answers(tmp_path: Path) -> None:
    audits, summary = _run(_auditor(tmp_path, limit=2))
    assert [a.answer.id for a in audits] == ["q1", "q2"] and summary.overall.n_answers == 2


def test_cleanup_needs_a_model(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--model"):
        _auditor(tmp_path, cleanup=True)


def test_load_done_appends_a_missing_newline(tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl"
    audit = AnswerAudit(answer=Answer(text="x", id="z"))
    path.write_text(audit.model_dump_json(), "utf-8")
    assert list(load_done(path)) == ["z"]
    assert path.read_text("utf-8").endswith("\n")


# --- issue 13: resumed audits report sources whose fetch outcome changed ---------------


class PageFetcher:
    """Fetches from a mutable dict of pages (content hash included); others are 404s."""

    def __init__(self, pages: dict[str, str]) -> None:
        self.pages = pages

    async def fetch_all(self, sources: Sequence[Source]) -> list[Source]:
        return [self._one(s) for s in sources]

    def _one(self, source: Source) -> Source:
        text = self.pages.get(source.url or "")
        if text is None:
            return source.model_copy(update={
                "status": "invalid", "failure": FetchFailure.HTTP_STATUS, "http_status": 404})
        return source.model_copy(update={"status": "fetched", "text": text,
                                         "content_hash": content_hash(text)})


def _factory(fetcher: PageFetcher) -> FetcherFactory:
    @asynccontextmanager
    async def make() -> AsyncIterator[Fetcher]:
        yield fetcher

    return make


def _shared_url_inputs() -> list[AuditInput]:
    rows = [{"id": f"q{n}", "answer": "Aspirin thins blood.",
             "sources": ["https://a.org/aspirin", f"https://b.org/{n}"]} for n in range(3)]
    inputs, _ = read_audit(b"".join(json.dumps(r).encode() + b"\n" for r in rows))
    return inputs


@pytest.mark.parametrize(("change", "kind"), [("gone", "validity"), ("edited", "content")])
def test_resume_reports_changed_fetch_outcomes(tmp_path: Path, change: str, kind: str) -> None:
    pages = {"https://a.org/aspirin": "aspirin thins blood",
             **{f"https://b.org/{n}": "other page" for n in range(3)}}
    fetcher = PageFetcher(pages)
    inputs = _shared_url_inputs()
    asyncio.run(_auditor(tmp_path, fetcher_factory=_factory(fetcher), limit=1,
                         record=False).run(inputs))
    if change == "gone":
        del pages["https://a.org/aspirin"]
    else:
        pages["https://a.org/aspirin"] = "aspirin does not thin blood"
    auditor = _auditor(tmp_path, fetcher_factory=_factory(fetcher), record=False)
    _, summary = asyncio.run(auditor.run(inputs))
    assert summary.notes["resumed"] == 1
    assert [c.url for c in summary.fetch_changes] == ["https://a.org/aspirin"]
    change_record = summary.fetch_changes[0]
    assert change_record.kind == kind
    assert sum(o.n_answers for o in change_record.outcomes) == 3
    assert any("different fetch outcome" in w for w in summary.warnings)
    saved = AuditSummary.model_validate_json((tmp_path / "out" / "summary.json").read_text())
    assert saved.fetch_changes == summary.fetch_changes
    html = (tmp_path / "out" / "report.html").read_text("utf-8")
    assert 'id="fetch-changes"' in html and "https://a.org/aspirin" in html


def test_unchanged_sources_on_resume_are_not_reported(tmp_path: Path) -> None:
    fetcher = PageFetcher({"https://a.org/aspirin": "aspirin thins blood"})
    inputs = _shared_url_inputs()
    asyncio.run(_auditor(tmp_path, fetcher_factory=_factory(fetcher), limit=1,
                         record=False).run(inputs))
    _, summary = asyncio.run(_auditor(tmp_path, fetcher_factory=_factory(fetcher),
                                      record=False).run(inputs))
    assert summary.fetch_changes == [] and summary.notes["resumed"] == 1
