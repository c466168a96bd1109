"""Judging a study's answers: an answer cut into units at a granularity (the whole
paragraph, its sentences, or the claims the decomposer finds), each unit judged against the
trial's curated summary, with the summary sections the judge was shown and the one its
verdict rests on. A failed judge call or a missing verdict is an ERROR unit, never a verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from medverify.config import Config
from medverify.decompose import Decomposer
from medverify.decompose.answer import decompose_answer
from medverify.errors import MedverifyError
from medverify.harness import stage_id
from medverify.judge import Judge, JudgeItem
from medverify.kb.embed import Embedder
from medverify.records import Answer, Category, Claim, ClaimResult
from medverify.study.questions import TrialEvidence
from medverify.study.records import (
    AnswerJudgment,
    Granularity,
    StudyTrial,
    TrialAnswer,
    TrialQuestion,
    UnitResult,
    text_sha256,
)
from medverify.text import sentence_spans


def sentence_units(text: str) -> list[str]:
    """The sentences of an answer, each bullet or numbered line on its own."""
    units = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        spans = sentence_spans(line)
        units += [line[a:b].strip() for a, b in spans] if spans else [line]
    return [u for u in units if any(c.isalnum() for c in u)]


@dataclass
class AnswerJudge:
    """Judges a study's answers, one answer at several granularities per judge call; keeps
    each trial's evidence (its summary, ranked per unit) in ``_evidence``."""

    config: Config
    judge: Judge
    decomposer: Decomposer | None
    embedder: Embedder | None
    _evidence: dict[str, TrialEvidence] = field(default_factory=dict, repr=False)

    def evidence(self, trial: StudyTrial) -> TrialEvidence:
        if trial.nct_id not in self._evidence:
            self._evidence[trial.nct_id] = TrialEvidence(trial, self.embedder)
        return self._evidence[trial.nct_id]

    async def units(self, answer: TrialAnswer, question: TrialQuestion,
                    granularity: Granularity) -> tuple[list[str], list[str]]:
        """The units of an answer at a granularity, and the notes on cutting it."""
        if granularity is Granularity.PARAGRAPH:
            return [answer.answer], []
        if granularity is Granularity.SENTENCE:
            return sentence_units(answer.answer), []
        assert self.decomposer is not None
        claims, errors = await decompose_answer(
            Answer(id=answer.id, text=answer.answer, question=question.text),
            self.decomposer, self.config)
        return [c.text for c in claims], errors

    async def judge_answer(self, trial: StudyTrial, question: TrialQuestion,
                           answer: TrialAnswer, granularities: Sequence[Granularity]) \
            -> list[AnswerJudgment]:
        """One answer judged at each of ``granularities`` (one judge call for all); never
        raises for a problem of this answer: an ERROR unit, or a judgment with ``error``
        set when it has no units."""
        common = {"answer_sha256": text_sha256(answer.answer), "judge": stage_id(self.judge),
                  "answer_id": answer.id}
        evidence = self.evidence(trial)
        cut: list[tuple[Granularity, list[str], list[str]]] = []
        for granularity in granularities:
            texts, notes = await self.units(answer, question, granularity)
            cut.append((granularity, texts, notes))
        items: list[JudgeItem] = []
        for granularity, texts, _ in cut:
            shown = evidence.for_units(texts, question, self.config.trials.evidence_k)
            items += [JudgeItem(claim=Claim(id=f"{granularity.value}-{n}", text=text),
                                passages=passages)
                      for n, (text, passages) in enumerate(zip(texts, shown, strict=True))]
        units = await self._judge_units(items, evidence)
        out = []
        for granularity, texts, notes in cut:
            if not texts:
                error = "; ".join(notes) or "no unit to judge in the answer"
                out.append(AnswerJudgment(granularity=granularity, error=error, notes=notes,
                                          **common))
                continue
            mine = [units[i.claim.id] for i in items
                    if i.claim.id.startswith(f"{granularity.value}-")]
            out.append(AnswerJudgment(granularity=granularity, units=mine, notes=notes,
                                      **common))
        return out

    async def _judge_units(self, items: list[JudgeItem],
                           evidence: TrialEvidence) -> dict[str, UnitResult]:
        if not items:
            return {}
        try:
            verdicts = await self.judge.judge(items)
        except MedverifyError as exc:
            return {i.claim.id: UnitResult(text=i.claim.text, category=Category.ERROR,
                                           sections=_sections(evidence, i),
                                           error=f"judge: {exc}") for i in items}
        by_id = {v.claim_id: v for v in verdicts}
        units = {}
        for item in items:
            verdict = by_id.get(item.claim.id)
            if verdict is None:
                result = ClaimResult.failed(item.claim, "judge returned no verdict",
                                            item.passages)
            else:
                result = ClaimResult.from_verdict(item.claim, item.passages, verdict)
            units[item.claim.id] = UnitResult(
                text=item.claim.text, category=result.category,
                sections=_sections(evidence, item),
                evidence_section=evidence.section_of(result.evidence_passage_id),
                evidence_quote=result.evidence_quote, error=result.error,
                warnings=result.warnings, verdict=result.verdict)
        return units


def _sections(evidence: TrialEvidence, item: JudgeItem) -> list[str]:
    return [s for p in item.passages if (s := evidence.section_of(p.id)) is not None]
