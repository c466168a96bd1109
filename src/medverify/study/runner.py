"""Running a clinical-trial study: ask every model every question about every trial under
every context, then judge each answer against the trial's curated summary at each
granularity.

A run directory holds the whole study:

1. ``run.json`` (:class:`StudyManifest`) is written on the first run and checked on every
   later one: resuming with other trials, models, contexts, granularities, questions, judge
   or prompt versions is refused (``fresh`` starts over).
2. ``trials.jsonl`` keeps each trial's registry record and curated summary, so the report
   and a rerun never need the registry files again.
3. ``answers.jsonl``: each (model, trial, question, context) answer is appended and flushed
   as soon as it is in. A rerun asks only what is missing; ERROR answers (provider failures)
   are asked again, the others never are.
4. ``judgments.jsonl``: each (answer, granularity) judgment is appended as soon as it is in.
   A rerun judges what is missing, what failed (no units), and what judged an answer text
   that has since changed.
5. :func:`medverify.study.report.finish` writes ``summary.json`` and ``report.md``
   from those files alone (``medverify trials report RUN`` does the same without a model).

Each run of :meth:`TrialStudy.run` is recorded in the run store (kind ``trials``). The
trials come from :mod:`medverify.study.selection`; an answer is cut into units and judged by
:mod:`medverify.study.judging`.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from medverify.config import Config
from medverify.decompose import Decomposer
from medverify.errors import ConfigError, InputError, ProviderError
from medverify.files import (
    append_record,
    atomic_write_text,
    read_records,
    write_records,
)
from medverify.harness import (
    CancelToken,
    Provenance,
    RunHarness,
    close_owned,
    new_run_id,
    run_each,
    stage_id,
)
from medverify.judge import Judge, has_trait
from medverify.kb.embed import Embedder
from medverify.kit import FlowKit
from medverify.llm.facade import Model, model_from_config
from medverify.prompts import load_prompt
from medverify.records import Usage, package_version
from medverify.study.judging import AnswerJudge
from medverify.study.questions import (
    CONTEXT_NAMES,
    QUESTIONS,
    TrialEvidence,
    context_block,
)
from medverify.study.records import (
    ANSWERS,
    JUDGMENTS,
    MANIFEST,
    TRIALS,
    AnswerJudgment,
    AnswerStatus,
    Context,
    Granularity,
    StudyManifest,
    StudyModel,
    StudyTrial,
    TrialAnswer,
    TrialQuestion,
    read_manifest,
    text_sha256,
    trials_sha256,
)
from medverify.study.report import FAILS_STUDY, finish, judge_warnings

STAGE = "trial_answer"
Progress = Callable[[str, int, int], None]
"""Called with (phase, done, total)."""

_FRESH = (MANIFEST, TRIALS, ANSWERS, JUDGMENTS, "summary.json", "report.md", "timing.json")


def parse_models(models: Sequence[str]) -> list[StudyModel]:
    """``LABEL=SPEC`` or ``SPEC`` strings as study models (the bench's rules)."""
    from medverify.bench.runner import parse_models as bench_models

    return [StudyModel(label=e.label, spec=e.spec) for e in bench_models(list(models))]


@dataclass
class Asked:
    """A model under test, by its label in the study."""

    label: str
    model: Model

    @property
    def stage(self) -> str:
        return f"{STAGE}:{self.label}"


@dataclass
class TrialStudy:
    """Everything a study needs; build it with :meth:`from_config`, close it with
    :meth:`aclose` (or ``async with``)."""

    config: Config
    root: Path
    models: list[StudyModel]
    asked: list[Asked]
    judge: Judge
    decomposer: Decomposer | None
    embedder: Embedder | None
    contexts: list[Context]
    granularities: list[Granularity]
    questions: list[TrialQuestion]
    ledger_usage: Callable[[], dict[str, Usage]]
    owned: tuple[object, ...] = ()
    fresh: bool = False
    record: bool = True
    progress: Progress | None = None
    cancel: CancelToken | None = None
    timing: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    _evidence: dict[str, TrialEvidence] = field(default_factory=dict, repr=False)
    _harness: RunHarness | None = field(default=None, repr=False)
    _cleared: bool = field(default=False, repr=False)

    @classmethod
    def from_config(
        cls, config: Config, *, models: Sequence[str], run_dir: Path,
        contexts: Sequence[Context | str] = tuple(Context),
        granularities: Sequence[Granularity | str] = tuple(Granularity),
        questions: Sequence[TrialQuestion] = QUESTIONS, fresh: bool = False,
        kit: FlowKit = FlowKit(),
    ) -> TrialStudy:
        """The study of ``models`` (``LABEL=SPEC`` or specs) in ``run_dir``. The judge and
        the claim decomposer use ``config.model`` (the builtin judge and the rules
        decomposer without one); the kit's judge, decomposer and embedder replace the
        configured ones (tests). The judge's evidence is ranked by BM25 alone when
        ``config.retrieval.mode`` is ``lexical``, else fused with the configured embedder."""
        entries = parse_models(models)
        contexts = [Context(c) for c in contexts]
        granularities = [Granularity(g) for g in granularities]
        if not contexts or not granularities or not questions:
            raise ConfigError("a study needs at least one context, granularity and question")
        opened = kit.open(config, need_kb=False)
        judge = kit.judge_for(config, opened.model)
        decomposer = (kit.decomposer_for(config, opened.model)
                      if Granularity.CLAIM in granularities else kit.decomposer)
        embedder = (kit.embedder_for(config) if config.retrieval.mode != "lexical"
                    else kit.embedder)
        asked = [Asked(e.label, model_from_config(config, e.spec)) for e in entries]

        def usage() -> dict[str, Usage]:
            out = dict(opened.ledger.as_dict())
            for a in asked:
                out.update(a.model.usage.as_dict())
            return out

        return cls(config=config, root=Path(run_dir), models=entries, asked=asked,
                   judge=judge, decomposer=decomposer, embedder=embedder,
                   contexts=contexts, granularities=granularities,
                   questions=list(questions), ledger_usage=usage,
                   owned=tuple(opened.owned), fresh=fresh, record=kit.record)

    async def aclose(self) -> None:
        for a in self.asked:
            await a.model.aclose()
        await close_owned(self.owned)

    async def __aenter__(self) -> TrialStudy:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    # -- identity ------------------------------------------------------------------------

    @property
    def prompt_versions(self) -> dict[str, str]:
        out = {STAGE: load_prompt(STAGE).id}
        judge_version = getattr(self.judge, "prompt_version", None)
        if judge_version:
            out["judge"] = judge_version
        if self.decomposer is not None:
            version = getattr(self.decomposer, "prompt_version", None)
            if version:
                out["decompose"] = version
        return out

    @property
    def judge_id(self) -> str:
        return stage_id(self.judge)

    @property
    def judge_fails_study(self) -> bool:
        """Whether the judge declares it cannot grade this study (the built-in judge)."""
        return has_trait(self.judge, FAILS_STUDY)

    @property
    def judge_warnings(self) -> list[str]:
        """What the study says about its judge before it runs and atop its report."""
        return judge_warnings(self.judge_fails_study)

    @property
    def decomposer_name(self) -> str:
        return self.decomposer.name if self.decomposer is not None else ""

    @property
    def provenance(self) -> Provenance:
        models = {"judge": self.judge_id,
                  **{f"answer:{m.label}": m.spec for m in self.models}}
        if self.decomposer is not None:
            models["decompose"] = self.decomposer_name
        return Provenance(models, self.prompt_versions)

    # -- the whole study -----------------------------------------------------------------

    async def run(self, trials: Sequence[StudyTrial], *,
                  selection: dict[str, Any] | None = None) -> dict[str, Any]:
        """Ask, judge and report (see the module doc); resumes an earlier run of the same
        study. Returns the summary (``summary.json``)."""
        started = time.perf_counter()
        trials = self.prepare(trials, selection=selection)
        self._harness = RunHarness.opening("trials", self.config, record=self.record,
                                           usage=self.ledger_usage, cancel=self.cancel)
        try:
            with self._harness.recording(self.provenance):
                answers = await self.ask_all(trials)
                judgments = await self.judge_all(trials, answers)
                failed = sum(1 for j in judgments if j.error)
                self._harness.fail_items(failed, len(judgments), "judged units")
                self.timing["total_s"] = round(time.perf_counter() - started, 3)
                self._write_timing()
                return finish(self.root, self.config)
        finally:
            self._harness = None

    # -- the manifest ----------------------------------------------------------------------

    def prepare(self, trials: Sequence[StudyTrial], *,
                selection: dict[str, Any] | None = None) -> list[StudyTrial]:
        """Write ``run.json`` and ``trials.jsonl``, or check them against an earlier run of
        the directory (ConfigError when anything that defines the study differs)."""
        trials = list(trials)
        if not trials:
            raise InputError("no trial to study: the selection matched no registry record")
        if self.fresh and not self._cleared:
            for name in _FRESH:
                path = self.root / name
                if path.is_dir():
                    shutil.rmtree(path)
                elif path.exists():
                    path.unlink()
            self._cleared = True
        manifest = self._manifest(trials, selection or {})
        existing = read_manifest(self.root)
        if existing is not None:
            self._check(existing, manifest)
        else:
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.root / MANIFEST, manifest.model_dump_json(indent=2) + "\n")
        if not (self.root / TRIALS).is_file() or existing is None:
            write_records(self.root / TRIALS, trials)
        return trials

    def _manifest(self, trials: Sequence[StudyTrial], selection: dict[str, Any]) \
            -> StudyManifest:
        return StudyManifest(
            run_id=new_run_id(), models=self.models, contexts=self.contexts,
            granularities=self.granularities, questions=self.questions,
            trials=[t.nct_id for t in trials], trials_sha256=trials_sha256(trials),
            json_chars=self.config.trials.json_chars, judge=self.judge_id,
            judge_fails_study=self.judge_fails_study, decomposer=self.decomposer_name,
            prompt_versions=self.prompt_versions,
            config=self.config.public(), selection=selection,
            medverify_version=package_version(),
        )

    def _check(self, before: StudyManifest, now: StudyManifest) -> None:
        hint = "use another run directory, or --fresh to start over (its answers are deleted)"
        fields = {
            "trials": (before.trials_sha256, now.trials_sha256),
            "models": ({(m.label, m.spec) for m in before.models},
                       {(m.label, m.spec) for m in now.models}),
            "contexts": (before.contexts, now.contexts),
            "granularities": (before.granularities, now.granularities),
            "questions": ([q.number for q in before.questions],
                          [q.number for q in now.questions]),
            "judge": (before.judge, now.judge),
            "decomposer": (before.decomposer, now.decomposer),
            "JSON context budget (trials.json_chars)": (before.json_chars, now.json_chars),
            "prompt versions": (before.prompt_versions, now.prompt_versions),
        }
        changed = [name for name, (a, b) in fields.items() if a != b]
        if changed:
            raise ConfigError(f"{self.root} is a study with other {', '.join(changed)} "
                              f"(first run {before.run_id}); {hint}")

    # -- asking --------------------------------------------------------------------------

    async def ask_all(self, trials: Sequence[StudyTrial]) -> list[TrialAnswer]:
        """Every model's answer to every (trial, question, context) not answered yet;
        returns all answers in study order."""
        started = time.perf_counter()
        wanted = [(a, t, q, c) for a in self.asked for t in trials for q in self.questions
                  for c in self.contexts]
        keys = {(a.label, t.nct_id, q.number, c.value) for a, t, q, c in wanted}
        found = read_records(self.root / ANSWERS, TrialAnswer, self.warnings,
                             key=lambda r: r.key)
        answers = {r.key: r for r in found if r.key in keys and r.status != AnswerStatus.ERROR}
        todo = [w for w in wanted if (w[0].label, w[1].nct_id, w[2].number, w[3].value)
                not in answers]
        self.counts["answers_resumed"] = len(answers)
        self.counts["answers_asked"] = len(todo)
        with (self.root / ANSWERS).open("a", encoding="utf-8") as handle:
            async def one(_: int, item: tuple[Asked, StudyTrial, TrialQuestion, Context]) \
                    -> None:
                answer = await self.ask(*item)
                append_record(handle, answer)
                answers[answer.key] = answer

            await run_each(todo, one, concurrency=self.config.bench.concurrency,
                           done=len(wanted) - len(todo), total=len(wanted),
                           cancel=self.cancel, progress=self._progress("ask"))
        self.timing["ask_s"] = round(time.perf_counter() - started, 3)
        return [answers[(a.label, t.nct_id, q.number, c.value)] for a, t, q, c in wanted]

    async def ask(self, asked: Asked, trial: StudyTrial, question: TrialQuestion,
                  context: Context) -> TrialAnswer:
        """One answer; never raises for a provider failure (an ERROR answer)."""
        block, cut = context_block(trial, context, self.config.trials.json_chars)
        prompt = load_prompt(STAGE)
        messages = prompt.render(context_name=CONTEXT_NAMES[context], context=block,
                                 question=question.text)
        common: dict[str, Any] = {
            "model": asked.label, "spec": asked.model.spec, "nct_id": trial.nct_id,
            "question": question.number, "context": context, "context_chars": len(block),
            "context_truncated": cut, "prompt_version": prompt.id,
        }
        settings = self.config.bench
        try:
            completion = await asked.model.complete(
                messages, stage=asked.stage, max_tokens=settings.max_tokens,
                temperature=settings.temperature)
        except ProviderError as exc:  # a ConfigError (no API key...) stops the study
            return TrialAnswer(status=AnswerStatus.ERROR, error=str(exc) or type(exc).__name__,
                               **common)
        text = completion.text.strip()
        return TrialAnswer(
            status=AnswerStatus.OK if text else AnswerStatus.EMPTY, answer=text,
            prompt_tokens=completion.usage.prompt_tokens,
            completion_tokens=completion.usage.completion_tokens,
            finish_reason=completion.finish_reason, cached=completion.cached,
            latency_s=completion.latency_s, **common)

    # -- judging -------------------------------------------------------------------------

    async def judge_all(self, trials: Sequence[StudyTrial],
                        answers: Sequence[TrialAnswer]) -> list[AnswerJudgment]:
        """Judge every OK answer at every granularity not judged yet (see the module doc).
        An answer's granularities still to judge go to the judge in one call (bigger
        batches for a local verifier)."""
        started = time.perf_counter()
        by_trial = {t.nct_id: t for t in trials}
        by_number = {q.number: q for q in self.questions}
        ok = [a for a in answers if a.status is AnswerStatus.OK]
        wanted = [(a, g) for a in ok for g in self.granularities]
        current = {(a.id, g.value): text_sha256(a.answer) for a, g in wanted}
        found = read_records(self.root / JUDGMENTS, AnswerJudgment, self.warnings,
                             key=lambda j: j.key)
        judged = {j.key: j for j in found
                  if current.get(j.key) == j.answer_sha256 and j.error is None
                  and j.judge == self.judge_id}
        todo = [(a, [g for g in self.granularities if (a.id, g.value) not in judged])
                for a in ok]
        todo = [(a, grans) for a, grans in todo if grans]
        made = sum(len(grans) for _, grans in todo)
        self.counts["judgments_resumed"] = len(wanted) - made
        self.counts["judgments_made"] = made
        judging = AnswerJudge(self.config, self.judge, self.decomposer, self.embedder,
                              self._evidence)
        with (self.root / JUDGMENTS).open("a", encoding="utf-8") as handle:
            async def one(_: int, item: tuple[TrialAnswer, list[Granularity]]) -> None:
                answer, grans = item
                for judgment in await judging.judge_answer(
                        by_trial[answer.nct_id], by_number[answer.question], answer, grans):
                    append_record(handle, judgment)
                    judged[judgment.key] = judgment

            await run_each(todo, one, concurrency=max(1, min(self.config.bench.concurrency, 8)),
                           done=len(ok) - len(todo), total=len(ok),
                           cancel=self.cancel, progress=self._progress("judge"))
        self.timing["judge_s"] = round(time.perf_counter() - started, 3)
        return [judged[(a.id, g.value)] for a, g in wanted]

    # -- progress and timing -------------------------------------------------------------

    def _progress(self, phase: str) -> Callable[[int, int], None] | None:
        if self.progress is None:
            return None
        progress = self.progress
        return lambda done, total: progress(phase, done, total)

    def _write_timing(self) -> None:
        import json

        atomic_write_text(self.root / "timing.json",
                          json.dumps({**self.timing, **self.counts}, indent=2) + "\n")
