"""The benchmark study (SourceCheckup): ask every model every question, audit the replies'
citations, summarise.

A run directory (:class:`~medverify.bench.layout.RunLayout`) holds the whole study:

1. ``run.json`` (:class:`BenchManifest`) is written on the first run and checked on every
   later one: resuming with other questions or other models is refused (``fresh`` starts
   over). ``questions.jsonl`` keeps the questions asked.
2. Every (model, question) pair not yet in ``replies.jsonl`` is asked, at most
   ``config.bench.concurrency`` questions per model at a time (the model facade also limits
   each provider). Each reply is appended and flushed at once, so Ctrl-C or a crash keeps
   every finished reply and a rerun asks only the missing pairs; ERROR replies (provider
   failures) are asked again on the next run, the others never are.
3. The replies become audit inputs (:func:`audit_input`) and the citation audit
   (:class:`~medverify.audit.runner.Auditor`) runs into ``audit/``, resuming by itself.
4. ``medverify.bench.summary.finish_run`` computes the study's metrics, report and exports.

Each run of :meth:`BenchRunner.run` is recorded in the run store (kind ``bench``, every
reply in ``bench_replies``) and its wall time per phase is written to ``timing.json``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from medverify.audit.records import AnswerAudit, AuditInput
from medverify.audit.runner import Auditor
from medverify.bench.ask import Asker, CallClock
from medverify.bench.layout import RunLayout
from medverify.bench.records import (
    BenchManifest,
    BenchOrigin,
    BenchSummary,
    ImportReport,
    ModelEntry,
    ModelReply,
    Question,
    ReplyStatus,
)
from medverify.config import Config
from medverify.errors import ConfigError, InputError
from medverify.files import (
    append_record,
    atomic_write_text,
    read_json_record,
    read_records,
    write_records,
)
from medverify.harness import (
    CancelToken,
    Provenance,
    RunHarness,
    gather_all,
    new_run_id,
    run_each,
    stage_id,
)
from medverify.kit import FlowKit
from medverify.llm.facade import model_from_config
from medverify.llm.spec import parse_spec
from medverify.records import Answer, Usage, package_version

AskProgress = Callable[[str, int, int], None]
"""Called with (model label, questions done, questions total)."""

NOT_AUDITED = (ReplyStatus.ERROR, ReplyStatus.EMPTY, ReplyStatus.REFUSAL)
"""Replies whose answer is not decomposed into claims: their URLs count in URL validity;
having no statement, they are outside statement- and response-level support (the report
says how many answers that leaves out per model)."""

_FRESH_PATHS = ("run.json", "questions.jsonl", "replies.jsonl", "audit", "summary.json",
                "report.html", "exports", "timing.json", "question_import.json")


# -- models and questions -------------------------------------------------------------------


def parse_models(models: Sequence[str | ModelEntry]) -> list[ModelEntry]:
    """Models under test from specs or ``label=spec`` strings (the label defaults to the
    spec). Labels must be unique and may not contain ``:`` before the ``=`` (a ``=`` after
    a ``:`` belongs to the spec's options) nor ``::``; raises :class:`ConfigError`."""
    entries = [m if isinstance(m, ModelEntry) else _entry(m) for m in models]
    if not entries:
        raise ConfigError("no model to benchmark: pass at least one model spec")
    for entry in entries:
        parse_spec(entry.spec)  # ConfigError for a bad spec, before anything is opened
    labels = [e.label for e in entries]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ConfigError(f"model labels must be unique; repeated: {', '.join(repeated)} "
                          "(name them with LABEL=SPEC)")
    return entries


def _entry(text: str) -> ModelEntry:
    text = text.strip()
    label, spec = text, text
    head, sep, tail = text.partition("=")
    if sep and ":" not in head and "?" not in head:
        label, spec = head.strip(), tail.strip()
    if not label or not spec:
        raise ConfigError(f"model {text!r}: expected SPEC or LABEL=SPEC")
    if "::" in label or any(c.isspace() for c in label):
        raise ConfigError(f"model label {label!r} may not contain '::' or whitespace")
    return ModelEntry(label=label, spec=spec)


def questions_sha256(questions: Sequence[Question]) -> str:
    """The hash of a question set: SHA-256 over each question's canonical JSON (sorted
    keys), one per line, in order."""
    digest = hashlib.sha256()
    for question in questions:
        canonical = json.dumps(question.model_dump(mode="json"), sort_keys=True,
                               ensure_ascii=False, separators=(",", ":"))
        digest.update(canonical.encode("utf-8", "surrogatepass") + b"\n")
    return digest.hexdigest()


def audit_input(reply: ModelReply, question: Question) -> AuditInput:
    """A reply as an input of the citation audit. ERROR, EMPTY and REFUSAL replies get no
    claims (nothing is decomposed) but keep their sources, so they count in the metrics."""
    answer = Answer(
        id=reply.answer_id,
        question=question.text,
        text=reply.answer,
        sources=reply.sources,
        meta=BenchOrigin(model=reply.model, question_source=question.source,
                         question_id=question.id, reply_status=reply.status.value).to_meta(),
    )
    return AuditInput(answer=answer, claims=[] if reply.status in NOT_AUDITED else None)


def _check_questions(questions: Sequence[Question]) -> None:
    if not questions:
        raise InputError("no questions to ask")
    ids = [q.id for q in questions]
    repeated = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) < len(ids) else []
    if repeated:
        raise InputError(f"question ids must be unique; repeated: {', '.join(repeated[:10])}")


# -- the runner ------------------------------------------------------------------------------


@dataclass
class BenchRunner:
    """Everything needed to run a study; build it with :meth:`from_config` and close it
    with :meth:`aclose` (or ``async with``)."""

    config: Config
    layout: RunLayout
    models: list[ModelEntry]
    askers: list[Asker]
    auditor: Auditor
    fresh: bool = False
    limit: int | None = None
    record: bool = True
    on_ask: AskProgress | None = None
    clock: CallClock = field(default_factory=CallClock)
    timing: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    _prepared: str | None = field(default=None, init=False, repr=False)
    _harness: RunHarness | None = field(default=None, init=False, repr=False)

    @classmethod
    def from_config(
        cls,
        config: Config,
        *,
        models: Sequence[str | ModelEntry],
        run_dir: Path,
        fresh: bool = False,
        limit: int | None = None,
        kit: FlowKit = FlowKit(),
    ) -> BenchRunner:
        """The study of ``models`` (specs or ``label=spec``) in ``run_dir``. Each model
        under test gets its own facade model (with the persistent request cache when
        ``config.llm.cache``, so a rerun is free); ``config.model`` (judge, decomposer)
        goes to the auditor, with the ``kit`` (its judge, embedder and fetcher factory replace
        the configured ones: tests, benchmarks). With the kit's ``executor`` the replies are
        audited there; the models under test are asked from here."""
        entries = parse_models(models)
        layout = RunLayout(Path(run_dir))
        clock = CallClock()
        askers = [
            Asker(model_from_config(config, e.spec), e.label,
                  settings=config.bench, clock=clock)
            for e in entries
        ]
        auditor = Auditor.from_config(config, out_dir=layout.audit_dir, kit=kit)
        return cls(config=config, layout=layout, models=entries, askers=askers,
                   auditor=auditor, fresh=fresh, limit=limit, record=kit.record, clock=clock)

    async def aclose(self) -> None:
        """Close the models under test and what the auditor opened."""
        for asker in self.askers:
            await asker.model.aclose()
        await self.auditor.aclose()

    async def __aenter__(self) -> BenchRunner:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    # -- the whole study -----------------------------------------------------------------

    async def run(self, questions: Sequence[Question], *,
                  questions_path: str | None = None,
                  import_report: ImportReport | None = None,
                  cancel: CancelToken | None = None) -> BenchSummary:
        """Ask, audit and summarise (see the module doc); resumes what an earlier run of
        the same study left. ``import_report`` (how the question file was read: duplicates,
        rows without text...) is kept in the run for the report. Returns the summary."""
        started = time.perf_counter()
        self.prepare(questions, questions_path=questions_path)
        if import_report is not None:
            atomic_write_text(self.layout.question_import,
                              import_report.model_dump_json(indent=2) + "\n")
        self._harness = RunHarness.opening("bench", self.config, record=self.record,
                                           usage=self._usage, cancel=cancel)
        try:
            with self._harness.recording(self.provenance):
                replies = await self.ask_all(questions)
                await self.audit_all(questions, replies)
                self._write_timing(started)
                with self._phase("summary_s"):
                    summary = await self._summarize()
                self._write_timing(started)
            return summary
        finally:
            self._harness = None

    async def _summarize(self) -> BenchSummary:
        from medverify.bench.summary import finish_run

        result: Any = finish_run(self.layout, self.config)
        if inspect.isawaitable(result):
            result = await result
        return result  # type: ignore[no-any-return]

    # -- (a) the manifest ----------------------------------------------------------------

    def prepare(self, questions: Sequence[Question], *,
                questions_path: str | None = None) -> BenchManifest:
        """Write ``run.json`` and ``questions.jsonl``, or check them against an earlier
        run of this directory (:class:`ConfigError` when the questions or the models
        differ). With ``fresh``, the earlier run's records are deleted first (once)."""
        questions = list(questions)
        _check_questions(questions)
        digest = questions_sha256(questions)
        if self.fresh and self._prepared is None:
            self._clear()
        existing = self._read_manifest()
        if existing is not None:
            self._check_manifest(existing, digest, len(questions))
            manifest = existing
        else:
            manifest = self._manifest(digest, len(questions), questions_path)
            self.layout.root.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.layout.manifest, manifest.model_dump_json(indent=2) + "\n")
        write_records(self.layout.questions, questions)
        self._prepared = digest
        return manifest

    def _manifest(self, digest: str, n: int, questions_path: str | None) -> BenchManifest:
        return BenchManifest(
            run_id=new_run_id(),
            models=self.models,
            questions_path=questions_path,
            questions_sha256=digest,
            n_questions=n,
            config=self.config.public(),
            prompt_versions=self.prompt_versions,
            judge=self.judge_id,
            medverify_version=package_version(),
        )

    @property
    def prompt_versions(self) -> dict[str, str]:
        answer = {"bench_answer": self.askers[0].prompt_version} if self.askers else {}
        return {**answer, **self.auditor.prompt_versions}

    @property
    def judge_id(self) -> str:
        return stage_id(self.auditor.judge)

    def _read_manifest(self) -> BenchManifest | None:
        return read_json_record(self.layout.manifest, BenchManifest, "run manifest")

    def _check_manifest(self, manifest: BenchManifest, digest: str, n: int) -> None:
        root = self.layout.root
        hint = "use another run directory, or --fresh to start over (its replies are deleted)"
        if manifest.questions_sha256 != digest:
            raise ConfigError(
                f"{root} is a study of {manifest.n_questions} other questions "
                f"(sha256 {manifest.questions_sha256[:12]}, now {n} questions with sha256 "
                f"{digest[:12]}); {hint}"
            )
        before = {(m.label, m.spec) for m in manifest.models}
        now = {(m.label, m.spec) for m in self.models}
        if before != now:
            raise ConfigError(
                f"{root} is a study of the models {_names(manifest.models)}, not "
                f"{_names(self.models)}; {hint}"
            )
        if manifest.judge and manifest.judge != self.judge_id:
            raise ConfigError(f"{root} was judged by {manifest.judge}, not {self.judge_id}: "
                              f"one study, one judge; {hint}")
        changed = {k for k, v in self.prompt_versions.items()
                   if manifest.prompt_versions.get(k, v) != v}
        if changed:
            raise ConfigError(f"{root} used other prompt versions for "
                              f"{', '.join(sorted(changed))}; {hint}")

    def _clear(self) -> None:
        for name in _FRESH_PATHS:
            path = self.layout.root / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()

    def _ensure_prepared(self, questions: Sequence[Question]) -> None:
        if self._prepared != questions_sha256(list(questions)):
            self.prepare(questions)

    def _chosen(self, questions: Sequence[Question]) -> list[Question]:
        chosen = list(questions)
        return chosen[: self.limit] if self.limit is not None else chosen

    # -- (b) asking ----------------------------------------------------------------------

    async def ask_all(self, questions: Sequence[Question]) -> list[ModelReply]:
        """Ask every model every question (the first ``limit``) not answered yet; returns
        the replies, model by model in question order. Records ``ask_s`` and
        ``model_busy_s`` (seconds with at least one call in flight) in :attr:`timing`."""
        self._ensure_prepared(questions)
        chosen = self._chosen(questions)
        replies = self._kept_replies(chosen)
        self.counts["replies_resumed"] = len(replies)
        busy_before = self.clock.busy_s
        with self._phase("ask_s"), self.layout.replies.open("a", encoding="utf-8") as handle:
            for reply in replies.values():
                self._save_reply(reply)
            jobs = [self._ask_model(asker, chosen, replies, handle) for asker in self.askers]
            await gather_all(jobs)
        self.timing["model_busy_s"] = round(self.clock.busy_s - busy_before, 4)
        self.counts["replies_asked"] = len(chosen) * len(self.askers) - \
            self.counts["replies_resumed"]
        return [replies[(a.label, q.id)] for a in self.askers for q in chosen]

    def _kept_replies(self, chosen: Sequence[Question]) -> dict[tuple[str, str], ModelReply]:
        """Replies already in ``replies.jsonl`` for this run's pairs (not ERROR ones)."""
        wanted = {(a.label, q.id) for a in self.askers for q in chosen}
        found = read_records(self.layout.replies, ModelReply, self.warnings, key=_reply_key)
        return {r.key: r for r in found if r.key in wanted and r.status != ReplyStatus.ERROR}

    async def _ask_model(self, asker: Asker, chosen: Sequence[Question],
                         replies: dict[tuple[str, str], ModelReply], handle: IO[str]) -> None:
        todo = [q for q in chosen if (asker.label, q.id) not in replies]
        done = len(chosen) - len(todo)
        self._ask_progress(asker.label, done, len(chosen))

        async def one(_: int, question: Question) -> None:
            reply = await asker.ask(question)
            append_record(handle, reply)
            self._save_reply(reply)
            replies[reply.key] = reply

        await run_each(todo, one, concurrency=self.config.bench.concurrency, done=done,
                       total=len(chosen), cancel=self._harness.cancel if self._harness else None,
                       progress=lambda n, total: self._ask_progress(asker.label, n, total))

    def _ask_progress(self, label: str, done: int, total: int) -> None:
        if self.on_ask is not None:
            self.on_ask(label, done, total)

    # -- (c) the audit -------------------------------------------------------------------

    async def audit_all(self, questions: Sequence[Question],
                        replies: Sequence[ModelReply]) -> list[AnswerAudit]:
        """Audit the replies' citations into ``audit/`` (resuming; an audit of an earlier
        version of a reply, e.g. an ERROR asked again, is redone). Records ``audit_s``."""
        by_id = {q.id: q for q in questions}
        missing = sorted({r.question_id for r in replies} - set(by_id))
        if missing:
            raise InputError(f"replies to unknown questions: {', '.join(missing[:10])}")
        # question by question, so that a page several models cite is split and embedded
        # once while it is in the passage cache
        order = {q.id: n for n, q in enumerate(questions)}
        ordered = sorted(replies, key=lambda r: order[r.question_id])
        inputs = [audit_input(r, by_id[r.question_id]) for r in ordered]
        with self._phase("audit_s"):
            self._drop_stale_audits(inputs)
            cancel = self._harness.cancel if self._harness else None
            audits, _ = await self.auditor.run(inputs, out_dir=self.layout.audit_dir,
                                               cancel=cancel)
        return audits

    def _drop_stale_audits(self, inputs: Sequence[AuditInput]) -> None:
        path = self.layout.audit_answers
        current = {i.answer.id: _fingerprint(i.answer) for i in inputs}
        audits = read_records(path, AnswerAudit, self.warnings, key=lambda a: a.answer.id)
        fresh = [a for a in audits
                 if current.get(a.answer.id, _fingerprint(a.answer)) == _fingerprint(a.answer)]
        if len(fresh) < len(audits):
            write_records(path, fresh)
            self.counts["audits_redone"] = len(audits) - len(fresh)

    # -- timing and the run store --------------------------------------------------------

    @contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.timing[name] = round(time.perf_counter() - started, 4)

    def _write_timing(self, started: float) -> None:
        self.timing["total_s"] = round(time.perf_counter() - started, 4)
        body = json.dumps({**self.timing, **self.counts}, indent=2)
        atomic_write_text(self.layout.timing, body + "\n")

    @property
    def provenance(self) -> Provenance:
        models = {**self.auditor.models, **{f"answer:{m.label}": m.spec for m in self.models}}
        return Provenance(models, self.prompt_versions)

    def _save_reply(self, reply: ModelReply) -> None:
        harness = self._harness
        if harness is not None and harness.store is not None and harness.run_id is not None:
            harness.store.save_bench_reply(harness.run_id, reply)

    def _usage(self) -> dict[str, Usage]:
        usage = dict(self.auditor.ledger.as_dict())
        for asker in self.askers:
            usage.update(asker.model.usage.as_dict())
        return usage


def _reply_key(reply: ModelReply) -> tuple[str, str]:
    return reply.key


def _fingerprint(answer: Answer) -> tuple[str, tuple[str | None, ...], str | None]:
    """What an audit depends on in its answer: the text, the cited URLs, the reply status."""
    return answer.text, tuple(s.url for s in answer.sources), BenchOrigin.of(answer).reply_status


def _names(models: Iterable[ModelEntry]) -> str:
    return ", ".join(m.label if m.label == m.spec else f"{m.label}={m.spec}" for m in models)
