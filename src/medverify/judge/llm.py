"""LLM judge: factual + counterfactual analysis of claims against retrieved passages (CHECK).

Claims whose evidence overlaps are batched into one call; the shared evidence goes first
in the prompt so that servers with prefix caching reuse it. Evidence and claims are fenced
with a content-derived token that untrusted text cannot predict. The parser is strict:
anything that does not match the expected JSON shape becomes a Verdict with ``error`` set,
never a category; a reply that is not JSON at all is asked for once more (the conversation
plus a note that it was not valid JSON), and a second failure is ERROR with both reasons.

With ``[judge_settings] logprobs`` on, the call asks for the tokens' log-probabilities and
each verdict records P(true) at its ``supported`` / ``contradicted`` values
(``Verdict.signals``, :mod:`medverify.judge.llm_signals`); with ``samples`` k > 1 each batch
is asked k - 1 more times at a temperature above 0 (k calls per batch) and each verdict
records the share of replies that gave its claim the first reply's category
(``agreement``). The verdict itself is always the first reply's.

What a verdict keeps of the reply (``raw_output``, reasons, quotes) is cut
to ``[llm] max_stored_chars`` and marked (:func:`medverify.llm.limits.clip_stored`).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from medverify.errors import MedverifyError, ParseError, ProviderError
from medverify.judge import JudgeItem, model_required
from medverify.judge.decide import check_verdict
from medverify.judge.evidence import UnknownPassage, resolve_passage, verify_analysis
from medverify.judge.llm_signals import Reading, agreement, read_values, value_signals
from medverify.llm.base import Message, TokenLogprobs
from medverify.llm.facade import Model
from medverify.llm.limits import clip_stored
from medverify.prompts import Prompt, load_prompt
from medverify.prompts.untrusted import fence_id, fenced, load_json_reply
from medverify.records import Analysis, Category, Passage, Verdict

if TYPE_CHECKING:
    from medverify.config import Config

log = logging.getLogger(__name__)

STAGE = "judge"
TOP_LOGPROBS = 5  # alternatives asked per generated token when logprobs are on
SAMPLE_TEMPERATURE = 0.7  # of the self-consistency samples after the first reply
REPLY_TOKENS_PER_CLAIM = 320  # reply budget: a claim's two analyses with quotes fit in it
REPLY_TOKENS_BASE = 64
RETRY_NOTE = ("Your reply was not a valid JSON object. Answer again with only the JSON "
              "object in the form asked for, and nothing else.")
RETRY_TEMPERATURE = 0.3  # the one retry after a reply that is not JSON
RETRIED_CHARS = 2000  # of the invalid reply kept in the conversation of the retry


class _Unparseable(MedverifyError):
    """The reply was not JSON twice (the first reply and the retry)."""

    def __init__(self, message: str, raw: str) -> None:
        super().__init__(message)
        self.raw = raw


@dataclass
class _Reply:
    """A parsed reply: its text, per-claim parse, log-probabilities and retries."""

    raw: str
    parsed: dict[str, Any]
    logprobs: list[TokenLogprobs] | None = None
    retries: int = 0


@dataclass
class _Batch:
    items: list[tuple[int, JudgeItem]] = field(default_factory=list)
    passages: dict[str, Passage] = field(default_factory=dict)

    def union_size(self, item: JudgeItem) -> int:
        return len(self.passages.keys() | {p.id for p in item.passages})

    def add(self, index: int, item: JudgeItem) -> None:
        self.items.append((index, item))
        for passage in item.passages:
            self.passages.setdefault(passage.id, passage)


def plan_batches(
    items: Sequence[JudgeItem], claims_per_call: int, max_passages: int
) -> list[_Batch]:
    """Group consecutive claims whose evidence overlaps enough to share one call.

    A claim joins the open batch while the batch has room and the union of passages stays
    within ``max_passages``; otherwise it opens a new batch. Items without passages are
    skipped (the caller settles them without a model call)."""
    batches: list[_Batch] = []
    current: _Batch | None = None
    for index, item in enumerate(items):
        if not item.passages:
            continue
        fits = (
            current is not None
            and len(current.items) < claims_per_call
            and current.union_size(item) <= max_passages
        )
        if not fits:
            current = _Batch()
            batches.append(current)
        assert current is not None
        current.add(index, item)
    return batches


class PromptedModelJudge:
    """What the judges that ask a chat model with a versioned prompt share: the registry
    factory (ConfigError without a model) and the prompt version."""

    name: str
    prompt: Prompt

    @classmethod
    def config_options(cls, config: Config, model: Model | None) -> dict[str, Any]:
        return {"model": model}

    @classmethod
    def from_config(cls, config: Config, model: Model | None) -> Any:
        """The registry factory: ConfigError when there is no model."""
        if model is None:
            raise model_required(cls.name)
        return cls(**cls.config_options(config, model))

    @property
    def prompt_version(self) -> str:
        return self.prompt.id


class LLMJudge(PromptedModelJudge):
    """Judge claims with a chat model. See ``prompts/judge/v1.md``."""

    name = "llm"
    needs_model = True  # medverify.judge.declares
    io_bound = True
    second_stage = True  # a cascade may send it the claims it does not settle

    def __init__(
        self,
        model: Model,
        *,
        claims_per_call: int = 4,
        max_passages: int = 10,
        max_passage_chars: int = 4000,
        prompt_version: str | None = None,
        logprobs: bool = False,
        samples: int = 1,
    ) -> None:
        self.model = model
        self.logprobs = logprobs
        self.samples = max(1, samples)
        self.claims_per_call = claims_per_call
        self.max_passages = max_passages
        self.max_passage_chars = max_passage_chars
        self.prompt: Prompt = load_prompt("judge", prompt_version)

    @classmethod
    def config_options(cls, config: Config, model: Model | None) -> dict[str, Any]:
        """Constructor options from the config: the model, ``claims_per_call`` and
        ``[judge_settings] max_passages``, ``logprobs`` and ``samples``."""
        settings = config.judge_settings
        return {"model": model, "claims_per_call": config.claims_per_call,
                "max_passages": settings.max_passages, "logprobs": settings.logprobs,
                "samples": settings.samples}

    @property
    def judge_id(self) -> str:
        return f"llm:{self.model.spec}"

    def batched(self, claims_per_call: int, max_passages: int) -> LLMJudge:
        """This judge asking ``claims_per_call`` claims per call with up to
        ``max_passages`` passages (the fact-checker's batching; same model and prompt)."""
        other = copy.copy(self)
        other.claims_per_call, other.max_passages = claims_per_call, max_passages
        return other

    async def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        verdicts: list[Verdict | None] = [None] * len(items)
        for index, item in enumerate(items):
            if not item.passages:
                verdicts[index] = self._no_evidence(item)
        batches = plan_batches(items, self.claims_per_call, self.max_passages)
        for batch_verdicts in await asyncio.gather(*(self._judge_batch(b) for b in batches)):
            for index, verdict in batch_verdicts:
                verdicts[index] = verdict
        return [v for v in verdicts if v is not None]

    def _no_evidence(self, item: JudgeItem) -> Verdict:
        reason = "no evidence passage was retrieved for this claim"
        return Verdict(
            claim_id=item.claim.id,
            passage_ids=[],
            factual=Analysis(holds=False, reason=reason),
            counterfactual=Analysis(holds=False, reason=reason),
            judge=self.judge_id,
            prompt_version=None,
        )

    async def _judge_batch(self, batch: _Batch) -> list[tuple[int, Verdict]]:
        passages = list(batch.passages.values())
        p_labels = {f"P{i}": p for i, p in enumerate(passages, 1)}
        c_labels = {f"C{i}": item for i, (_, item) in enumerate(batch.items, 1)}
        messages = self.prompt.render(**self._prompt_values(p_labels, c_labels))
        claims = {label: item.claim.text for label, item in c_labels.items()}
        try:
            reply = await self._ask(messages, claims, p_labels)
        except _Unparseable as exc:
            error = f"unparseable judge output: {exc}"
            return [(i, self._failed(item, passages, error, exc.raw)) for i, item in batch.items]
        except MedverifyError as exc:
            error = f"judge call failed: {exc}"
            return [(i, self._failed(item, passages, error, None)) for i, item in batch.items]
        readings = read_values(reply.raw, reply.logprobs) if self.logprobs else {}
        out = []
        for (index, item), label in zip(batch.items, c_labels, strict=True):
            verdict = self._verdict(item, passages, reply.parsed[label], reply.raw)
            out.append((index, self._with_signals(verdict, readings.get(label, {}), reply)))
        if self.samples > 1:
            out = await self._agreement(out, messages, claims, p_labels, batch, passages)
        return out

    async def _ask(self, messages: Sequence[Message], claims: dict[str, str],
                   p_labels: dict[str, Passage], *, temperature: float = 0.0,
                   seed: int | None = None) -> _Reply:
        """One call, parsed; a reply that is not JSON at all is asked for once more.

        Raises :class:`_Unparseable` after the second failure and MedverifyError when a
        call fails."""
        options: dict[str, Any] = {
            "stage": STAGE, "json_mode": True, "temperature": temperature, "seed": seed,
            "max_tokens": REPLY_TOKENS_BASE + REPLY_TOKENS_PER_CLAIM * len(claims),
            "top_logprobs": TOP_LOGPROBS if self.logprobs else None}
        labels = list(claims)
        first = await self._complete(messages, options)
        try:
            parsed = parse_judge_output(first.text, labels, p_labels, claims)
            return _Reply(first.text, parsed, first.logprobs)
        except ParseError as exc:
            reason = str(exc)
        log.warning("judge reply is not valid JSON (%s); asking once more", reason)
        again = [*messages, Message(role="assistant", content=first.text[:RETRIED_CHARS]),
                 Message(role="user", content=RETRY_NOTE)]
        # at temperature 0 a model repeats its reply word for word: the retry samples
        second = await self._complete(again, options | {
            "temperature": max(temperature, RETRY_TEMPERATURE), "seed": (seed or 0) + 1000})
        try:
            parsed = parse_judge_output(second.text, labels, p_labels, claims)
        except ParseError as exc:
            raise _Unparseable(f"{reason}; asked again: {exc}", second.text) from None
        return _Reply(second.text, parsed, second.logprobs, retries=1)

    async def _complete(self, messages: Sequence[Message], options: dict[str, Any]) -> Any:
        """One call; a server that refuses the log-probability request (HTTP 400/422) is
        asked again without it, and from then on never asked for them: no signal is fine,
        an ERROR because of log-probabilities is not."""
        try:
            return await self.model.complete(messages, **options)
        except ProviderError as exc:
            if options["top_logprobs"] is None or exc.status not in (400, 422):
                raise
            log.warning("the model refused log-probabilities (%s); asking without them", exc)
            self.logprobs = False
            options["top_logprobs"] = None
            return await self.model.complete(messages, **options)

    def _with_signals(self, verdict: Verdict, readings: dict[str, Reading],
                      reply: _Reply) -> Verdict:
        """The verdict with its log-prob signals and retry count (never on an ERROR)."""
        if not verdict.ok:
            return verdict
        assert verdict.factual is not None and verdict.counterfactual is not None
        signals = value_signals(readings, verdict.factual.holds, verdict.counterfactual.holds)
        if reply.retries:
            signals["json_retries"] = float(reply.retries)
        return verdict.model_copy(update={"signals": {**verdict.signals, **signals}})

    async def _agreement(self, out: list[tuple[int, Verdict]], messages: Sequence[Message],
                         claims: dict[str, str], p_labels: dict[str, Passage], batch: _Batch,
                         passages: list[Passage]) -> list[tuple[int, Verdict]]:
        """``out`` with ``agreement`` and ``samples`` recorded from k - 1 sampled replies;
        a sample whose call or reply failed disagrees on every claim."""
        others: list[list[Category | None]] = []
        for seed in range(1, self.samples):
            try:
                reply = await self._ask(messages, claims, p_labels,
                                        temperature=SAMPLE_TEMPERATURE, seed=seed)
            except MedverifyError as exc:
                log.info("self-consistency sample %d failed: %s", seed, exc)
                others.append([None] * len(batch.items))
                continue
            others.append([self._verdict(item, passages, reply.parsed[label], reply.raw).category
                           for (_, item), label in zip(batch.items, claims, strict=True)])
        kept = []
        for position, (index, verdict) in enumerate(out):
            if verdict.ok:
                share = agreement(verdict.category, [o[position] for o in others])
                signals = {**verdict.signals, "agreement": share,
                           "samples": float(self.samples)}
                verdict = verdict.model_copy(update={"signals": signals})
            kept.append((index, verdict))
        return kept

    def _prompt_values(
        self, p_labels: dict[str, Passage], c_labels: dict[str, JudgeItem]
    ) -> dict[str, str]:
        texts = [p.text[: self.max_passage_chars] for p in p_labels.values()]
        texts += [item.claim.text for item in c_labels.values()]
        fence = fence_id(texts)
        passages = "\n".join(
            fenced(fence, f"{label} | {_describe(p)}", p.text[: self.max_passage_chars])
            for label, p in p_labels.items()
        )
        claims = "\n".join(
            fenced(fence, label, item.claim.text) for label, item in c_labels.items()
        )
        return {"fence": fence, "passages": passages, "claims": claims}

    def _verdict(
        self, item: JudgeItem, passages: list[Passage], parsed: _Parsed, raw: str
    ) -> Verdict:
        if isinstance(parsed, str):
            return self._failed(item, passages, f"unparseable judge output: {parsed}", raw)
        factual, counterfactual = parsed
        verdict = Verdict(
            claim_id=item.claim.id,
            passage_ids=[p.id for p in passages],
            factual=self._kept(factual),
            counterfactual=self._kept(counterfactual),
            judge=self.judge_id,
            prompt_version=self.prompt_version,
            raw_output=clip_stored(raw, self._stored_chars),
        )
        return check_verdict(verdict, item.claim.text, passages)

    def _failed(
        self, item: JudgeItem, passages: list[Passage], error: str, raw: str | None
    ) -> Verdict:
        log.warning("claim %s: %s", item.claim.id, error)
        return Verdict(
            claim_id=item.claim.id,
            passage_ids=[p.id for p in passages],
            judge=self.judge_id,
            prompt_version=self.prompt_version,
            raw_output=clip_stored(raw, self._stored_chars),
            error=error,
        )

    @property
    def _stored_chars(self) -> int:
        return self.model.settings.max_stored_chars

    def _kept(self, analysis: Analysis) -> Analysis:
        """``analysis`` with its reason and quote cut for keeping (checked before the cut)."""
        limit = self._stored_chars
        return analysis.model_copy(update={"reason": clip_stored(analysis.reason, limit),
                                           "quote": clip_stored(analysis.quote, limit)})


def _describe(passage: Passage) -> str:
    parts = [f"title: {passage.title}" if passage.title else "", f"doc: {passage.doc_id}"]
    return " | ".join(p for p in parts if p).replace("\n", " ").replace(">>>", "> > >")


# The parse result for one claim: the two analyses, or the reason they could not be read.
_Parsed = tuple[Analysis, Analysis] | str


def parse_judge_output(
    raw: str, claim_labels: list[str], passages: dict[str, Passage],
    claims: Mapping[str, str] | None = None,
) -> dict[str, _Parsed]:
    """Parse the judge's JSON strictly.

    Raises ParseError when the reply as a whole is unusable (duplicate keys in a JSON
    object included); returns, per claim label, the two analyses or a string saying what
    was wrong with that claim's entry. ``claims`` (label -> claim text), when given, lets
    each quote be checked against the key content of its claim (``judge.evidence``)."""
    data = load_json_reply(raw)
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise ParseError("expected an object with a 'results' list", raw=raw)
    parsed: dict[str, _Parsed] = {label: "no result for this claim" for label in claim_labels}
    seen: set[str] = set()
    for entry in results:
        label = entry.get("claim_id") if isinstance(entry, dict) else None
        if not isinstance(label, str) or label not in parsed:
            continue
        parsed[label] = (
            "duplicate results for this claim" if label in seen
            else _entry(entry, passages, (claims or {}).get(label))
        )
        seen.add(label)
    return parsed


def _entry(entry: dict[str, Any], passages: dict[str, Passage], claim: str | None) -> _Parsed:
    try:
        factual = _analysis(entry.get("factual"), "supported", passages, claim)
        counterfactual = _analysis(entry.get("counterfactual"), "contradicted", passages, claim)
    except ValueError as exc:
        return str(exc)
    return factual, counterfactual


def _analysis(
    block: Any, key: str, passages: dict[str, Passage], claim: str | None = None
) -> Analysis:
    """One analysis, its evidence checked (``judge.evidence``): a passage label the judge was
    not shown raises (the claim becomes ERROR); a holding analysis whose quote does not
    count (not in the passage it names, a fragment that drops a negation, too little of the
    ``claim``'s content, ...) is kept with ``verified=False`` and ``quote_problem`` and does
    not count."""
    if not isinstance(block, dict):
        raise ValueError(f"missing analysis object for '{key}'")
    holds = block.get(key)
    if not isinstance(holds, bool):
        raise ValueError(f"'{key}' must be true or false, got {holds!r}")
    try:
        passage = resolve_passage(block.get("passage"), passages)
    except UnknownPassage as exc:
        raise ValueError(f"'{key}' analysis {exc}") from None
    quote = block.get("quote") if isinstance(block.get("quote"), str) else None
    reason = block.get("reasoning") if isinstance(block.get("reasoning"), str) else None
    if key == "contradicted" and isinstance(block.get("negation"), str) and reason:
        reason = f"Negation: {block['negation']} — {reason}"
    analysis = Analysis(
        holds=holds,
        passage_id=passage.id if passage else None,
        quote=quote.strip() or None if quote else None,
        reason=reason,
    )
    return verify_analysis(analysis, passage, claim, key)
