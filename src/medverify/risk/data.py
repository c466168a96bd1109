"""Training data for the risk classifier, with the provenance of every label.

Two sources: the knowledge-base judge's verdicts (:func:`labels_from_reports`: a claim
judged FACT or HALLUCINATION becomes an example; other categories are skipped and
counted) and synthetic hallucinations (:class:`CounterfactualGenerator`: an LLM rewrites
a factual text into a plausible but false one, changing one clinically meaningful
detail). Examples are stored as JSONL (:func:`write_examples`, :func:`read_examples`)
and named by :func:`examples_sha256` in the classifier's card.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from medverify.errors import InputError, ParseError, ProviderError
from medverify.files import atomic_write_text
from medverify.prompts import load_prompt
from medverify.prompts.untrusted import fence_id, fenced, load_json_reply
from medverify.records import Category, ClaimResult, Report, content_hash
from medverify.risk.records import LabeledExample, RiskLabel

if TYPE_CHECKING:
    from medverify.llm.facade import Model

STAGE = "counterfactual"
_LABELS = {Category.FACT: RiskLabel.FACT, Category.HALLUCINATION: RiskLabel.HALLUCINATION}
MAX_BAD_LINES_SHOWN = 10


# --------------------------------------------------------------------------- judge labels


@dataclass
class LabelHarvest:
    """Examples taken from reports, and how many claim results were skipped, by reason
    (a category other than FACT/HALLUCINATION, or ``duplicate`` for an id seen before)."""

    examples: list[LabeledExample] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


def collect_labels(reports: Iterable[Report]) -> LabelHarvest:
    """Every claim the knowledge-base judge found FACT or HALLUCINATION, as an example."""
    harvest = LabelHarvest()
    seen: set[str] = set()
    for report in reports:
        for result in report.results:
            label = _LABELS.get(result.category)
            if label is None:
                harvest.skipped[result.category.value] += 1
                continue
            example = _judged_example(report, result, label)
            if example.id in seen:
                harvest.skipped["duplicate"] += 1
                continue
            seen.add(example.id)
            harvest.examples.append(example)
    return harvest


def labels_from_reports(reports: Sequence[Report]) -> list[LabeledExample]:
    """The examples of :func:`collect_labels` (use that for the skipped counts)."""
    return collect_labels(reports).examples


def _judged_example(report: Report, result: ClaimResult, label: RiskLabel) -> LabeledExample:
    claim = result.claim
    verdict = result.verdict
    provenance: dict[str, Any] = {
        "source": "kb_judge",
        "judge": report.models.get("judge") or (verdict.judge if verdict else ""),
        "prompt_version": report.prompt_versions.get("judge"),
        "run_id": report.run_id,
        "kb_snapshot": report.kb_snapshot,
        "answer_id": report.answer.id,
        "claim_id": claim.id,
        "category": result.category.value,
    }
    if claim.span is not None:
        provenance["span"] = [claim.span.start, claim.span.end]
    run = report.run_id or "no-run"
    return LabeledExample(id=f"kb:{run}:{report.answer.id}:{claim.id}",
                          question=report.answer.question, text=claim.text, label=label,
                          provenance=provenance)


# --------------------------------------------------------------------------- counterfactuals


class _Reply(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    false_text: str
    change: str


@dataclass(frozen=True)
class Reject:
    """A factual text for which no counterfactual was made: why, and the raw reply."""

    original_id: str
    reason: str  # provider_error | invalid_reply | unchanged | length | not_fact
    detail: str
    raw: str | None = None


Source = LabeledExample | tuple[str, str | None, str]


class CounterfactualGenerator:
    """Rewrites factual texts into plausible but false ones with an LLM (the paper's
    counterfactual generation): one clinically meaningful detail changes (a dose, a
    population, the direction of an effect, a contraindication); style and length stay.

    Texts whose reply is not the expected JSON, is unchanged, or has a very different
    length give no example: they are counted in ``counts`` and kept in ``rejects`` with
    the raw reply. A provider failure is a reject too; a configuration error is raised.
    """

    def __init__(self, model: Model, prompt_version: str = "v1", *, temperature: float = 0.0,
                 max_length_ratio: float = 2.0) -> None:
        self.model = model
        self.prompt = load_prompt(STAGE, prompt_version)
        self.temperature = temperature
        self.max_length_ratio = max_length_ratio
        self.rejects: list[Reject] = []
        self.counts: Counter[str] = Counter()

    @property
    def prompt_version(self) -> str:
        return self.prompt.id

    async def generate(self, texts: Sequence[Source]) -> list[LabeledExample]:
        """One HALLUCINATION example per factual text that was rewritten, in input order."""
        originals = [_as_example(item) for item in texts]
        made = await asyncio.gather(*(self._one(o) for o in originals))
        return [example for example in made if example is not None]

    async def _one(self, original: LabeledExample) -> LabeledExample | None:
        if original.label != RiskLabel.FACT:
            return self._reject(original, "not_fact", "only FACT examples are rewritten")
        try:
            completion = await self.model.complete(
                self._messages(original), stage=STAGE, json_mode=True,
                temperature=self.temperature)
        except ProviderError as exc:
            return self._reject(original, "provider_error", str(exc))
        try:
            reply = parse_counterfactual(completion.text)
        except ParseError as exc:
            return self._reject(original, "invalid_reply", str(exc), completion.text)
        problem = self._problem(original.text, reply.false_text)
        if problem is not None:
            return self._reject(original, problem[0], problem[1], completion.text)
        self.counts["generated"] += 1
        return self._example(original, reply)

    def _messages(self, original: LabeledExample) -> list[Any]:
        question = original.question or "(no question given)"
        fence = fence_id([original.text, question])
        return self.prompt.render(fence=fence, question=fenced(fence, "question", question),
                                  text=fenced(fence, "factual text", original.text))

    def _problem(self, before: str, after: str) -> tuple[str, str] | None:
        if _normal(before) == _normal(after):
            return "unchanged", "the rewritten text is the same as the original"
        ratio = max(len(after), 1) / max(len(before), 1)
        if not 1 / self.max_length_ratio <= ratio <= self.max_length_ratio:
            return "length", f"the rewritten text is {ratio:.2f} times as long as the original"
        return None

    def _reject(self, original: LabeledExample, reason: str, detail: str,
                raw: str | None = None) -> None:
        self.counts[reason] += 1
        self.rejects.append(Reject(original.id, reason, detail, raw))

    def _example(self, original: LabeledExample, reply: _Reply) -> LabeledExample:
        provenance = {"source": "synthetic", "generator": self.model.spec,
                      "prompt_version": self.prompt_version, "original_id": original.id,
                      "change": reply.change}
        return LabeledExample(
            id=f"cf:{original.id}:{content_hash(reply.false_text)[:8]}",
            question=original.question, text=reply.false_text, context=original.context,
            label=RiskLabel.HALLUCINATION, provenance=provenance)


def parse_counterfactual(raw: str) -> _Reply:
    """The ``{"false_text": ..., "change": ...}`` object of a reply, both non-empty."""
    value = load_json_reply(raw, "counterfactual reply")
    try:
        reply = _Reply.model_validate(value)
    except ValidationError as exc:
        raise ParseError(f"counterfactual reply does not match the expected form: "
                         f"{_first_error(exc)}", raw=raw) from None
    if not reply.false_text.strip() or not reply.change.strip():
        raise ParseError("counterfactual reply has an empty false_text or change", raw=raw)
    return reply


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    return f"{'.'.join(map(str, error['loc'])) or 'reply'}: {error['msg']}"


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold()


def _as_example(item: Source) -> LabeledExample:
    if isinstance(item, LabeledExample):
        return item
    if isinstance(item, tuple) and len(item) == 3:
        ident, question, text = item
        return LabeledExample(id=str(ident), question=question, text=text, label=RiskLabel.FACT,
                              provenance={"source": "given"})
    raise InputError(f"expected a LabeledExample or an (id, question, text) tuple, got "
                     f"{type(item).__name__}")


# --------------------------------------------------------------------------- files


def write_examples(path: str | os.PathLike[str], examples: Iterable[LabeledExample]) -> Path:
    """Write examples as JSONL (one per line, atomically); returns the path."""
    lines = [example.model_dump_json() for example in examples]
    return atomic_write_text(path, "".join(line + "\n" for line in lines))


def read_examples(path: str | os.PathLike[str]) -> list[LabeledExample]:
    """Read a JSONL file of examples. Every line is validated; blank lines are skipped.
    Raises :class:`InputError` listing the bad lines (number and problem)."""
    source = Path(path)
    try:
        text = source.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read examples from {source}: {exc}") from None
    examples, bad = _parse_lines(text.splitlines())
    if bad:
        shown = "; ".join(bad[:MAX_BAD_LINES_SHOWN])
        extra = len(bad) - MAX_BAD_LINES_SHOWN
        more = f" (+{extra} more)" if extra > 0 else ""
        raise InputError(f"{source}: {len(bad)} bad line(s): {shown}{more}")
    return examples


def _parse_lines(lines: Sequence[str]) -> tuple[list[LabeledExample], list[str]]:
    examples: list[LabeledExample] = []
    bad: list[str] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            example = LabeledExample.model_validate_json(line)
        except ValidationError as exc:
            bad.append(f"line {number}: {_first_error(exc)}")
            continue
        if example.id in first_line:
            bad.append(f"line {number}: duplicate id {example.id!r} (first on line "
                       f"{first_line[example.id]})")
            continue
        first_line[example.id] = number
        examples.append(example)
    return examples, bad


def examples_sha256(examples: Iterable[LabeledExample]) -> str:
    """sha256 of the examples' canonical JSON (sorted keys, compact, one per line, in
    order: the order decides the train/test split, so it is part of the data)."""
    digest = hashlib.sha256()
    for example in examples:
        canonical = json.dumps(example.model_dump(mode="json"), sort_keys=True,
                               separators=(",", ":"), ensure_ascii=False)
        digest.update(canonical.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()
