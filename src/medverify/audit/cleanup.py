"""SourceCleanup (Wu et al. 2025): rewrite each unsupported statement to what its source
supports, or remove it, and verify every rewrite again with the judge.

For every claim of an audited answer whose ``supported`` is False, one source is chosen
(see :func:`choose_source`): a valid source the claim cites, else the valid source whose
pair came closest to supporting it, else the first valid source. A chat model reads the
statement and that source's passages (fenced as untrusted data) and answers
``{"action": "rewrite"|"remove", "statement", "reason"}``. A rewrite is judged again
against the same passages: supported (category ``FACT``) -> ``FIXED``, otherwise
``STILL_UNSUPPORTED``.

Honest outcomes, never guesses:

- a reply that is not the expected JSON -> ``ERROR`` with the raw output kept;
- a failed model or judge call -> ``ERROR`` with the message; other claims go on;
- no valid source at all -> ``STILL_UNSUPPORTED`` with ``source_id=None`` and no model
  call: there is nothing to rewrite against, and removing the statement is an editorial
  decision the audit does not make on its own.

Claims whose support is unknown (``supported is None``: a judge call failed) are not
cleaned: they are not known to be unsupported.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from medverify.audit.records import (
    AnswerAudit,
    ClaimAudit,
    CleanupOutcome,
    CleanupResult,
    PairJudgement,
)
from medverify.errors import ConfigError, ParseError
from medverify.judge import Judge, JudgeItem
from medverify.llm.facade import Model
from medverify.prompts import Prompt, load_prompt
from medverify.prompts.untrusted import fence_id, fenced, load_json_reply, validation_detail
from medverify.records import Category, Claim, Passage, Source, Verdict

log = logging.getLogger(__name__)

STAGE = "cleanup"
SUPPORT_KEY = "SUPPORTED"


class PassageSelector(Protocol):
    """What SourceCleanup needs from a passage selector (``medverify.audit.select``)."""

    def select(self, claims: Sequence[Claim], source: Source) -> dict[str, list[Passage]]: ...


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    action: Literal["rewrite", "remove"]
    statement: str | None = None
    reason: str | None = None


@dataclass
class _Task:
    """One unsupported claim on its way through SourceCleanup."""

    audit: ClaimAudit
    source: Source | None
    passages: list[Passage]
    result: CleanupResult | None = None
    rewritten: str | None = None
    raw: str | None = None
    reason: str | None = None
    asked: bool = False


def parse_cleanup_reply(raw: str) -> tuple[str, str | None, str | None]:
    """``(action, statement, reason)`` from the model's reply; ParseError when it is not a
    JSON object with ``action`` "rewrite" (and a non-empty ``statement``) or "remove"."""
    data = load_json_reply(raw)
    try:
        reply = _Reply.model_validate(data)
    except ValidationError as exc:
        raise ParseError(f"unexpected structure: {validation_detail(exc)}", raw=raw) from None
    statement = (reply.statement or "").strip() or None
    if reply.action == "rewrite" and statement is None:
        raise ParseError("action 'rewrite' without a statement", raw=raw)
    return reply.action, statement if reply.action == "rewrite" else None, reply.reason


def support_probability(pair: PairJudgement | None) -> float | None:
    """The judge's probability that the source supports the claim, when it gave one."""
    if pair is None or not pair.verdict.probabilities:
        return None
    value = pair.verdict.probabilities.get(SUPPORT_KEY)
    return float(value) if value is not None else None


def choose_source(claim: ClaimAudit, sources: Sequence[Source]) -> Source | None:
    """The source to clean ``claim`` against: among the valid sources it cites (else among
    all valid sources), the one whose pair has the highest support probability, the first
    one when no probability is known; None without any valid source."""
    valid = [s for s in sources if s.valid]
    cited = [s for s in valid if s.id in claim.cited_source_ids]
    pool = cited or valid
    if not pool:
        return None
    pairs = {p.source_id: p for p in claim.pairs}
    ranked = [(support_probability(pairs.get(s.id)), s) for s in pool]
    known = [(p, s) for p, s in ranked if p is not None]
    return max(known, key=lambda item: item[0])[1] if known else pool[0]


class SourceCleanup:
    """Rewrite or remove unsupported statements (SourceCleanup) and verify rewrites.

    ``selector`` picks passages when the chosen source has no judged passages for the claim;
    without one, the first ``max_source_chars`` characters of the source are used.
    """

    def __init__(
        self,
        model: Model,
        judge: Judge,
        *,
        selector: PassageSelector | None = None,
        max_concurrency: int = 4,
        prompt_version: str | None = None,
        max_passage_chars: int = 4000,
        max_source_chars: int = 6000,
    ) -> None:
        if max_concurrency < 1:
            raise ConfigError(f"cleanup max_concurrency must be at least 1, got {max_concurrency}")
        self.model = model
        self.judge = judge
        self.selector = selector
        self.max_concurrency = max_concurrency
        self.max_passage_chars = max_passage_chars
        self.max_source_chars = max_source_chars
        self.prompt: Prompt = load_prompt(STAGE, prompt_version)

    @property
    def prompt_version(self) -> str:
        return self.prompt.id

    async def clean(self, audit: AnswerAudit) -> list[CleanupResult]:
        """One result per claim with ``supported is False``, in claim order."""
        tasks = [self._task(c, audit.answer.sources) for c in audit.claims if c.supported is False]
        limit = asyncio.Semaphore(self.max_concurrency)
        await asyncio.gather(*(self._rewrite(t, limit) for t in tasks if t.result is None))
        await self._verify([t for t in tasks if t.result is None])
        return [t.result for t in tasks if t.result is not None]

    # -- choosing the source and its passages ------------------------------------------

    def _task(self, claim: ClaimAudit, sources: Sequence[Source]) -> _Task:
        source = choose_source(claim, sources)
        if source is None:
            task = _Task(claim, None, [])
            task.result = self._result(task, CleanupOutcome.STILL_UNSUPPORTED)
            return task
        try:
            passages = self._passages(claim, source)
        except Exception as exc:  # a selector failure stops this claim only
            task = _Task(claim, source, [])
            task.result = self._result(task, CleanupOutcome.ERROR,
                                       error=f"passage selection failed: {_describe(exc)}")
            return task
        return _Task(claim, source, passages)

    def _passages(self, claim: ClaimAudit, source: Source) -> list[Passage]:
        pair = next((p for p in claim.pairs if p.source_id == source.id and p.passages), None)
        if pair is not None:
            return list(pair.passages)
        if self.selector is not None:
            selected = self.selector.select([claim.claim], source).get(claim.claim.id, [])
            if selected:
                return list(selected)
        text = (source.text or "")[: self.max_source_chars]
        return [Passage(id=f"{source.id}#0", doc_id=source.id, text=text, title=source.title,
                        url=source.url, source=source.id)]

    # -- the model's rewrite ---------------------------------------------------------------

    async def _rewrite(self, task: _Task, limit: asyncio.Semaphore) -> None:
        messages = self.prompt.render(**self._prompt_values(task))
        task.asked = True
        try:
            async with limit:
                completion = await self.model.complete(messages, stage=STAGE, json_mode=True)
        except Exception as exc:  # ProviderError, ConfigError, ...: this claim only
            log.warning("cleanup of claim %s failed: %s", task.audit.claim.id, exc)
            task.result = self._result(task, CleanupOutcome.ERROR,
                                       error=f"cleanup call failed: {_describe(exc)}")
            return
        task.raw = completion.text
        try:
            action, statement, reason = parse_cleanup_reply(completion.text)
        except ParseError as exc:
            task.result = self._result(task, CleanupOutcome.ERROR,
                                       error=f"unparseable cleanup output: {exc}")
            return
        task.reason = (reason or "").strip() or None
        if action == "remove":
            task.result = self._result(task, CleanupOutcome.REMOVED)
        else:
            task.rewritten = statement

    def _prompt_values(self, task: _Task) -> dict[str, str]:
        texts = [p.text[: self.max_passage_chars] for p in task.passages]
        statement = task.audit.claim.text
        fence = fence_id([*texts, statement])
        passages = "\n".join(
            fenced(fence, f"P{i}{_title(p)}", text)
            for i, (p, text) in enumerate(zip(task.passages, texts, strict=True), 1)
        )
        return {"fence": fence, "passages": passages,
                "statement": fenced(fence, "S1", statement)}

    # -- verifying rewrites ------------------------------------------------------------

    async def _verify(self, tasks: Sequence[_Task]) -> None:
        if not tasks:
            return
        items = [JudgeItem(claim=_clean_claim(t), passages=t.passages) for t in tasks]
        try:
            verdicts = await self.judge.judge(items)
            if len(verdicts) != len(items):
                raise RuntimeError(f"judge returned {len(verdicts)} verdicts for {len(items)}")
        except Exception as exc:  # the judge failed as a whole: every rewrite is unverified
            error = f"verification failed: {_describe(exc)}"
            for task in tasks:
                task.result = self._result(task, CleanupOutcome.ERROR, error=error)
            return
        for task, verdict in zip(tasks, verdicts, strict=True):
            task.result = self._verified(task, verdict)

    def _verified(self, task: _Task, verdict: Verdict) -> CleanupResult:
        if not verdict.ok:
            return self._result(task, CleanupOutcome.ERROR, verdict=verdict,
                                error=f"verification failed: {verdict.error or 'no verdict'}")
        fixed = verdict.category == Category.FACT
        outcome = CleanupOutcome.FIXED if fixed else CleanupOutcome.STILL_UNSUPPORTED
        return self._result(task, outcome, verdict=verdict)

    def _result(self, task: _Task, outcome: CleanupOutcome, *, verdict: Verdict | None = None,
                error: str | None = None) -> CleanupResult:
        return CleanupResult(
            claim_id=task.audit.claim.id,
            source_id=task.source.id if task.source is not None else None,
            original=task.audit.claim.text,
            rewritten=task.rewritten,
            outcome=outcome,
            reason=task.reason if task.source is not None else _NO_SOURCE,
            verdict=verdict,
            raw_output=task.raw,
            prompt_version=self.prompt_version if task.asked else None,
            error=error,
        )


_NO_SOURCE = "no valid source to rewrite against; not sent to the model"


def cleanup_counts(results: Sequence[CleanupResult]) -> dict[str, int]:
    """Counts per outcome (``removed``, ``fixed``, ``still_unsupported``, ``error``) and
    ``total``; every outcome is present, zero when absent."""
    counts = {outcome.value: 0 for outcome in CleanupOutcome}
    for result in results:
        counts[result.outcome.value] += 1
    counts["total"] = len(results)
    return counts


def _clean_claim(task: _Task) -> Claim:
    original = task.audit.claim
    assert task.rewritten is not None
    return Claim(id=f"{original.id}-clean", text=task.rewritten, markers=list(original.markers),
                 decomposer=STAGE)


def _title(passage: Passage) -> str:
    if not passage.title:
        return ""
    flat = " ".join(passage.title.split()).replace(">>>", "> > >")
    return f" | title: {flat}"


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
