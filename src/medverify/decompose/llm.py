"""The LLM decomposer (:class:`LLMDecomposer`): a chat model names atomic, self-contained
claims, each pointing at a numbered segment of our own segmentation, from which the claim's
span is taken. The model's JSON reply is parsed strictly (:func:`parse_reply`). The prompt
(``decompose/v2`` by default; ``decompose/v1`` stays loadable) asks the model to name every
claim's subject; a claim that still opens with a pronoun or an instruction without one is
resolved by the same rules as the rule decomposer's (:mod:`medverify.decompose.subjects`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, ValidationError

from medverify.citations import normalize_marker, strip_markers, unique
from medverify.decompose.segment import Segment, _Draft, _numbered, segment
from medverify.decompose.subjects import resolve_subjects
from medverify.errors import ConfigError, ParseError
from medverify.prompts import load_prompt
from medverify.prompts.untrusted import defuse, load_json_reply, validation_detail
from medverify.records import Answer, Claim

if TYPE_CHECKING:
    from medverify.config import Config
    from medverify.llm.facade import Model

# The name the logger had before the package split, so log lines read the same.
log = logging.getLogger("medverify.decompose")


class _ReplyClaim(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: str
    sentence: int
    markers: list[str | int] = []


class _Reply(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    claims: list[_ReplyClaim]


def parse_reply(raw: str) -> list[_ReplyClaim]:
    """Parse the model's JSON reply strictly (a ```json fence is tolerated)."""
    data = load_json_reply(raw, "decomposer reply")
    try:
        return _Reply.model_validate(data).claims
    except ValidationError as exc:
        raise ParseError("decomposer reply has an unexpected structure: "
                         f"{validation_detail(exc)}", raw=raw) from None


def _one_line(text: str) -> str:
    return " ".join(text.split())


class LLMDecomposer:
    """Decomposition by a chat model, with spans from our own segmentation.

    The answer's segments are sent numbered ``[S<index>]`` inside a fence, in chunks of
    ``chunk_size`` segments (run concurrently), each with the ``context`` segments before
    it for resolving pronouns. A claim pointing at a segment outside its chunk is dropped
    with a warning; a reply whose claims all point outside it raises :class:`ParseError`.
    """

    name = "llm"
    stage = "decompose"

    def __init__(self, model: Model, *, version: str = "v2", chunk_size: int = 40,
                 context: int = 2, max_tokens: int | None = None,
                 name_subjects: bool = True) -> None:
        if chunk_size < 1 or context < 0:
            raise ConfigError("chunk_size must be >= 1 and context >= 0")
        self.model = model
        self.prompt = load_prompt(self.stage, version)
        self.chunk_size = chunk_size
        self.context = context
        self.max_tokens = max_tokens
        self.name_subjects = name_subjects

    @classmethod
    def from_config(cls, config: Config | None = None,
                    model: Model | None = None) -> LLMDecomposer:
        """The registry factory (``factory(config, model)``); ConfigError without a model."""
        if model is None:
            raise ConfigError("the 'llm' decomposer needs a model: pass --model (e.g. "
                              "openai:gpt-4o-mini) or choose --decomposer rules")
        return cls(model)

    @property
    def prompt_version(self) -> str:
        return self.prompt.id

    async def decompose(self, answer: Answer) -> list[Claim]:
        segments = segment(answer.text)
        if not segments:
            return []
        starts = range(0, len(segments), self.chunk_size)
        chunks = [segments[s: s + self.chunk_size] for s in starts]
        contexts = [segments[max(0, s - self.context): s] for s in starts]
        replies = await asyncio.gather(*(
            self._decompose_chunk(answer.question, chunk, ctx)
            for chunk, ctx in zip(chunks, contexts, strict=True)))
        drafts = [d for chunk_drafts in replies for d in chunk_drafts]
        if self.name_subjects:
            named = resolve_subjects([d.text for d in drafts], answer.question, answer.text)
            drafts = [replace(d, text=new) for d, new in zip(drafts, named, strict=True)]
        return _numbered([_with_original(d) for d in drafts], self.name)

    async def _decompose_chunk(self, question: str | None, chunk: Sequence[Segment],
                               context: Sequence[Segment]) -> list[_Draft]:
        messages = self.prompt.render(
            question=defuse(_one_line(question or "(no question given)")),
            context=self._context_block(context),
            sentences="\n".join(f"[S{s.index}] {defuse(_one_line(s.text))}" for s in chunk),
        )
        completion = await self.model.complete(messages, stage=self.stage, temperature=0.0,
                                               max_tokens=self.max_tokens, json_mode=True)
        if completion.finish_reason == "length":
            raise ParseError("decomposer reply was cut off (finish_reason=length); raise "
                             "max_tokens or lower chunk_size", raw=completion.text)
        return self._drafts(parse_reply(completion.text), chunk, completion.text)

    @staticmethod
    def _context_block(context: Sequence[Segment]) -> str:
        if not context:
            return "(no preceding sentences)"
        return "\n".join(f"[S{s.index}] {defuse(_one_line(s.text))}" for s in context)

    def _drafts(self, claims: Sequence[_ReplyClaim], chunk: Sequence[Segment],
                raw: str) -> list[_Draft]:
        by_index = {s.index: s for s in chunk}
        drafts = [d for c in claims if (d := _llm_draft(c, by_index)) is not None]
        if claims and not drafts:
            raise ParseError("no claim in the decomposer reply points at a sentence it was "
                             f"given (S{chunk[0].index}-S{chunk[-1].index})", raw=raw)
        return drafts


def _with_original(draft: _Draft) -> _Draft:
    """The draft with its sentence (markers removed) as ``original`` when the claim's text
    is not that sentence word for word."""
    sentence = _one_line(strip_markers(draft.segment.text)[0])
    return draft if draft.text == sentence else replace(draft, original=sentence)


def _llm_draft(claim: _ReplyClaim, by_index: dict[int, Segment]) -> _Draft | None:
    seg = by_index.get(claim.sentence)
    text, text_markers = strip_markers(claim.text)
    if seg is None or not text:
        log.warning("decompose: dropped claim %r (sentence %d is not in this chunk or the "
                    "text is empty)", claim.text[:80], claim.sentence)
        return None
    given = unique(m for raw in claim.markers for m in normalize_marker(str(raw)))
    segment_markers = strip_markers(seg.text)[1]
    kept = [m for m in unique([*given, *text_markers]) if m in segment_markers]
    return _Draft(text, kept or segment_markers, seg)

