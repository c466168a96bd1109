"""Hallucination risk from a chat API alone (CHECK, section 3.7.1): no prompt log-probabilities.

The question is rephrased (prompt ``rephrase/v1``, five times by default) and the judge model
is asked once per prompt variant (the original question and each rephrasing, the text kept
the same) whether the text contains a hallucination, with a one-token yes/no answer
(prompt ``risk_judge/v1``, ``max_tokens=1``, temperature 0) and the top-20 log-probabilities
of that token. Per variant:

* ``yes_mass`` / ``no_mass``: the summed probabilities of the top-k tokens that normalise to
  "yes" / "no" (case, surrounding spaces, punctuation and tokenizer word markers ignored, so
  "Yes", " yes" and "YES." all count as yes);
* ``p_yes = yes_mass / (yes_mass + no_mass)``: renormalised over yes + no, since the rest of
  the mass went to tokens that are neither answer. No yes/no token in the top-k: the variant
  is unscored (``p_yes`` None), which is not an error;
* ``entropy``: of the top-k distribution in nats, with the probability outside the top-k
  counted as one extra outcome (so the tail is not dropped; a lower bound of the full
  entropy).

:func:`features` aggregates the variants into classifier features named in
:data:`API_FEATURE_NAMES` (schema :data:`API_SCHEMA_VERSION`). A provider failure is kept in
the result (``error``) and never raised for one item.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import string
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from medverify.errors import ConfigError, ParseError, ProviderError
from medverify.llm.base import Completion, Message
from medverify.llm.facade import Model
from medverify.prompts import load_prompt
from medverify.prompts.untrusted import fence_id, fenced, load_json_reply
from medverify.records import Record
from medverify.risk.records import FeatureRow, FeatureSchema, Granularity, TopToken

API_SCHEMA_VERSION = "api-v1"
REPHRASE_STAGE = "risk_rephrase"
JUDGE_STAGE = "risk_judge"

API_FEATURE_NAMES: tuple[str, ...] = (
    "api.p_yes.mean",
    "api.p_yes.std",  # population standard deviation over the scored variants
    "api.p_yes.min",
    "api.p_yes.max",
    "api.vote_yes.frac",  # share of scored variants with p_yes > 0.5 (the paper's mode vote)
    "api.entropy.mean",
    "api.entropy.std",
    "api.yesno_mass.mean",
    "api.yesno_mass.min",
    "api.variants",  # number of scored variants
)

_STRIP = string.whitespace + string.punctuation + "\u2581\u0120“”‘’«»"


class VariantScore(Record):
    """The judge's yes/no answer for one prompt variant."""

    variant: str  # "original", "rephrase-1", ...
    question: str | None = None
    answer: str = ""  # the token the judge generated
    top: list[TopToken] = Field(default_factory=list)  # the first token's top-k
    yes_mass: float | None = None
    no_mass: float | None = None
    p_yes: float | None = None  # None: unscored (no yes/no token in the top-k, or an error)
    entropy: float | None = None
    error: str | None = None

    @property
    def scored(self) -> bool:
        return self.p_yes is not None


class ApiRiskResult(Record):
    """All prompt variants of one text, and how the rephrasing went."""

    schema_version: str = API_SCHEMA_VERSION
    judge: str
    question: str | None = None
    text: str
    variants: list[VariantScore] = Field(default_factory=list)
    rephrasings_requested: int = 0
    rephrasings_invalid: int = 0  # requested rephrasings the rephraser did not validly give
    rephrase_error: str | None = None
    error: str | None = None  # set when no variant could be judged (all failed)

    @property
    def scored(self) -> list[VariantScore]:
        return [variant for variant in self.variants if variant.scored]


class _Rephrased(Record):
    questions: list[str] = Field(default_factory=list)
    requested: int = 0
    invalid: int = 0
    error: str | None = None


def yes_no_label(token: str) -> Literal["yes", "no"] | None:
    """``"yes"`` / ``"no"`` when the token is that word (ignoring case, spaces, punctuation
    and tokenizer word markers), else None."""
    word = token.strip(_STRIP).casefold()
    if word in ("yes", "no"):
        return "yes" if word == "yes" else "no"
    return None


def yes_no_mass(top: Sequence[TopToken]) -> tuple[float, float]:
    """Summed probabilities of the tokens meaning yes and no."""
    yes = no = 0.0
    for candidate in top:
        label = yes_no_label(candidate.token)
        if label == "yes":
            yes += math.exp(candidate.logprob)
        elif label == "no":
            no += math.exp(candidate.logprob)
    return yes, no


def top_entropy(top: Sequence[TopToken]) -> float:
    """Entropy (nats) of the top-k probabilities plus the remaining mass as one outcome."""
    probabilities = [math.exp(candidate.logprob) for candidate in top]
    tail = max(0.0, 1.0 - sum(probabilities))
    return -sum(p * math.log(p) for p in [*probabilities, tail] if p > 0.0)


def score_completion(variant: str, question: str | None, completion: Completion) -> VariantScore:
    """One variant's score from the judge's completion (its first token's top-k)."""
    base = VariantScore(variant=variant, question=question, answer=completion.text)
    if not completion.logprobs:
        return base.model_copy(update={"error": "the judge returned no log-probabilities "
                                       "(does the endpoint support logprobs/top_logprobs?)"})
    first = completion.logprobs[0]
    top = [TopToken(token=t.token, logprob=t.logprob) for t in first.top] or \
        [TopToken(token=first.token, logprob=first.logprob)]
    yes, no = yes_no_mass(top)
    p_yes = yes / (yes + no) if yes + no > 0.0 else None
    return base.model_copy(update={"top": top, "yes_mass": yes, "no_mass": no,
                                   "p_yes": p_yes, "entropy": top_entropy(top)})


def parse_rephrasings(raw: str, question: str, wanted: int) -> _Rephrased:
    """The valid rephrasings in a reply (a JSON list of strings): non-empty, distinct, not
    the question itself, at most ``wanted``; the shortfall is counted as invalid."""
    try:
        value = load_json_reply(raw, "rephrasings")
    except ParseError as exc:
        return _Rephrased(requested=wanted, invalid=wanted, error=str(exc))
    if not isinstance(value, list):
        return _Rephrased(requested=wanted, invalid=wanted,
                          error=f"rephrasings are not a JSON list: {type(value).__name__}")
    seen = {question.strip().casefold()}
    valid: list[str] = []
    for item in value:
        text = item.strip() if isinstance(item, str) else ""
        if text and text.casefold() not in seen and len(valid) < wanted:
            seen.add(text.casefold())
            valid.append(text)
    return _Rephrased(questions=valid, requested=wanted, invalid=wanted - len(valid))


class ApiRiskScorer:
    """Hallucination-risk evidence from a chat API's yes/no log-probabilities."""

    def __init__(self, judge: Model, *, rephraser: Model | None = None, rephrasings: int = 5,
                 top_logprobs: int = 20) -> None:
        if rephrasings < 0:
            raise ConfigError(f"rephrasings must be 0 or more, not {rephrasings}")
        if top_logprobs < 1:
            raise ConfigError(f"top_logprobs must be 1 or more, not {top_logprobs}")
        self.judge = judge
        self.rephraser = rephraser
        self.rephrasings = rephrasings
        self.top_logprobs = top_logprobs
        self._rephrase_prompt = load_prompt("rephrase", "v1")
        self._judge_prompt = load_prompt("risk_judge", "v1")

    def __repr__(self) -> str:
        return (f"ApiRiskScorer(judge={self.judge.id!r}, rephrasings={self.rephrasings}, "
                f"top_logprobs={self.top_logprobs})")

    async def rephrase(self, question: str) -> list[str]:
        """Up to ``rephrasings`` rephrasings of the question (only the valid ones; none
        without a rephraser). Raises :class:`ProviderError` when the rephraser fails."""
        return (await self._rephrase(question)).questions

    async def _rephrase(self, question: str) -> _Rephrased:
        if self.rephraser is None or self.rephrasings == 0:
            return _Rephrased()
        fence = fence_id([question])
        messages = self._rephrase_prompt.render(
            count=str(self.rephrasings), fence=fence,
            question=fenced(fence, "question", question))
        completion = await self.rephraser.complete(messages, stage=REPHRASE_STAGE,
                                                   temperature=0.0)
        return parse_rephrasings(completion.text, question, self.rephrasings)

    async def score(self, question: str | None, text: str) -> ApiRiskResult:
        """Ask the judge about ``text`` under every prompt variant; never raises for a
        provider failure (kept in the result)."""
        rephrased = await self._safe_rephrase(question)
        prompts: list[tuple[str, str | None]] = [("original", question)]
        prompts += [(f"rephrase-{i}", q) for i, q in enumerate(rephrased.questions, 1)]
        variants = await asyncio.gather(*(self._judge_one(name, q, text) for name, q in prompts))
        failed = [v.error for v in variants if v.error]
        return ApiRiskResult(
            judge=self.judge.id, question=question, text=text, variants=list(variants),
            rephrasings_requested=rephrased.requested, rephrasings_invalid=rephrased.invalid,
            rephrase_error=rephrased.error,
            error=failed[0] if len(failed) == len(variants) else None,
        )

    async def score_many(self, items: Sequence[tuple[str | None, str]]) -> list[ApiRiskResult]:
        """:meth:`score` for (question, text) pairs, concurrently (the model facade limits
        concurrency per provider)."""
        return list(await asyncio.gather(*(self.score(q, text) for q, text in items)))

    async def _safe_rephrase(self, question: str | None) -> _Rephrased:
        if not question or self.rephraser is None or self.rephrasings == 0:
            return _Rephrased()
        try:
            return await self._rephrase(question)
        except ProviderError as exc:
            return _Rephrased(requested=self.rephrasings, invalid=self.rephrasings,
                              error=str(exc))

    async def _judge_one(self, variant: str, question: str | None, text: str) -> VariantScore:
        try:
            completion = await self.judge.complete(
                self._judge_messages(question, text), stage=JUDGE_STAGE, temperature=0.0,
                max_tokens=1, top_logprobs=self.top_logprobs)
        except ProviderError as exc:
            return VariantScore(variant=variant, question=question, error=str(exc))
        return score_completion(variant, question, completion)

    def _judge_messages(self, question: str | None, text: str) -> list[Message]:
        subject = "statement" if question is None else "answer"
        fence = fence_id([question or "", text])
        parts: list[str] = [] if question is None else [
            f"Question (fence {fence}):\n{fenced(fence, 'question', question)}"]
        parts.append(f"{subject.capitalize()} (fence {fence}):\n{fenced(fence, subject, text)}")
        return self._judge_prompt.render(subject=subject, material="\n\n".join(parts))


def features(result: ApiRiskResult) -> dict[str, float]:
    """Classifier features of one result (names from :data:`API_FEATURE_NAMES`; only
    ``api.variants`` when no variant was scored: the rest are missing, not guessed)."""
    scored = result.scored
    values = {"api.variants": float(len(scored))}
    if not scored:
        return values
    p_yes = [v.p_yes for v in scored if v.p_yes is not None]
    entropy = [v.entropy for v in scored if v.entropy is not None]
    mass = [(v.yes_mass or 0.0) + (v.no_mass or 0.0) for v in scored]
    values.update({
        "api.p_yes.mean": statistics.fmean(p_yes), "api.p_yes.std": statistics.pstdev(p_yes),
        "api.p_yes.min": min(p_yes), "api.p_yes.max": max(p_yes),
        "api.vote_yes.frac": sum(p > 0.5 for p in p_yes) / len(p_yes),
        "api.entropy.mean": statistics.fmean(entropy),
        "api.entropy.std": statistics.pstdev(entropy),
        "api.yesno_mass.mean": statistics.fmean(mass), "api.yesno_mass.min": min(mass),
    })
    return {name: values[name] for name in API_FEATURE_NAMES if name in values}


def feature_schema(judge: str, granularity: Granularity = "answer") -> FeatureSchema:
    """The schema of :func:`features` for a classifier card."""
    return FeatureSchema(version=API_SCHEMA_VERSION, granularity=granularity, scorers=[judge],
                         names=list(API_FEATURE_NAMES))


def feature_row(result: ApiRiskResult, unit_id: str,
                granularity: Granularity = "answer") -> FeatureRow:
    """:func:`features` as a :class:`FeatureRow`, with the features it lacks in ``missing``."""
    values = features(result)
    return FeatureRow(unit_id=unit_id, granularity=granularity, text=result.text, values=values,
                      missing=[name for name in API_FEATURE_NAMES if name not in values])
