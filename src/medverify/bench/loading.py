"""The records of a benchmark run directory, read back: :class:`RunRecords` and
:func:`load_run`.

``run.json`` (the manifest), ``questions.jsonl``, ``replies.jsonl`` and the audit
(``audit/answers.jsonl``), in question order then model order, whatever order the run
completed them in. What the summary (:mod:`medverify.bench.summary`), the report
(:mod:`medverify.bench.report`) and the exported tables (:mod:`medverify.bench.export`)
are computed from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from medverify.audit.records import AnswerAudit
from medverify.bench.layout import RunLayout
from medverify.bench.records import BenchManifest, BenchOrigin, ModelReply, Question
from medverify.errors import InputError
from medverify.files import read_records


@dataclass
class RunRecords:
    """Everything stored in one run directory (``layout`` None when built in memory)."""

    manifest: BenchManifest
    questions: list[Question] = field(default_factory=list)
    replies: list[ModelReply] = field(default_factory=list)
    audits: list[AnswerAudit] = field(default_factory=list)
    layout: RunLayout | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        """Model labels: the manifest's, then any other label found in replies or audits."""
        seen = [m.label for m in self.manifest.models]
        seen += [r.model for r in self.replies] + [audit_model(a) for a in self.audits]
        return list(dict.fromkeys(seen))

    def audits_by_model(self) -> dict[str, list[AnswerAudit]]:
        """Every model label (audited or not) -> its audited answers."""
        found: dict[str, list[AnswerAudit]] = {label: [] for label in self.labels}
        for audit in self.audits:
            found[audit_model(audit)].append(audit)
        return found

    def replies_by_model(self) -> dict[str, list[ModelReply]]:
        found: dict[str, list[ModelReply]] = {label: [] for label in self.labels}
        for reply in self.replies:
            found[reply.model].append(reply)
        return found

    def sources(self) -> list[str]:
        """Question sources, sorted (from the questions, then the audits)."""
        names = {q.source for q in self.questions}
        found = (BenchOrigin.of(a.answer).question_source for a in self.audits)
        names |= {source for source in found if source is not None}
        return sorted(names)


def audit_model(audit: AnswerAudit) -> str:
    """The model label of an audited answer: its :class:`BenchOrigin` model, else the answer
    id's prefix (``model::question``)."""
    value = BenchOrigin.of(audit.answer).model
    return value if value is not None else audit.answer.id.split("::", 1)[0]


def _manifest(layout: RunLayout) -> BenchManifest:
    if not layout.exists():
        raise InputError(
            f"{layout.root} is not a benchmark run directory (no run.json): give the "
            "directory `medverify bench run` wrote"
        )
    try:
        return BenchManifest.model_validate_json(layout.manifest.read_text("utf-8"))
    except (ValidationError, ValueError) as exc:
        raise InputError(f"{layout.manifest} is not a benchmark manifest: {exc}") from exc


def load_run(layout: RunLayout, warnings: list[str]) -> RunRecords:
    """The records of a run directory. Missing replies or audit are empty (and said so in
    ``warnings``); unreadable lines are skipped with a warning. Files are never rewritten
    here: a run may still be appending to them."""
    manifest = _manifest(layout)
    questions = read_records(layout.questions, Question, warnings, key=lambda q: q.id,
                             repair=False)
    replies = read_records(layout.replies, ModelReply, warnings, key=lambda r: r.key,
                           repair=False)
    audits = read_records(layout.audit_answers, AnswerAudit, warnings,
                          key=lambda a: a.answer.id, repair=False)
    for path, items in ((layout.replies, replies), (layout.audit_answers, audits)):
        if not items:
            warnings.append(f"{path} is missing or empty")
    # the files are in completion order, which varies between runs; the bootstrap must not
    # depend on it: question order, then model order
    rank = _ranks(manifest, questions)
    replies.sort(key=lambda r: rank(r.model, r.question_id))
    audits.sort(key=lambda a: _audit_rank(rank, a))
    return RunRecords(manifest, questions, replies, audits, layout, list(warnings))


def _audit_rank(rank: Callable[[str, str], tuple[int, int, str, str]],
                audit: AnswerAudit) -> tuple[int, int, str, str]:
    origin = BenchOrigin.of(audit.answer)
    return rank(origin.text("model", ""), origin.text("question_id", audit.answer.id))


def _ranks(manifest: BenchManifest,
           questions: Sequence[Question]) -> Callable[[str, str], tuple[int, int, str, str]]:
    question_rank = {q.id: n for n, q in enumerate(questions)}
    model_rank = {m.label: n for n, m in enumerate(manifest.models)}

    def rank(model: str, question_id: str) -> tuple[int, int, str, str]:
        return (question_rank.get(question_id, len(question_rank)),
                model_rank.get(model, len(model_rank)), question_id, model)

    return rank


