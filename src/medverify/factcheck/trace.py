"""Tracing: the chunk that best supports each final fact, and the sentences of the final
answer linked to their facts and chunks (step 5 of Vladika et al. 2025).

A fact's candidates are the passages of its last step, the evidence it was last judged on.
Two ways to rank them:

- ``similarity``: cosine similarity between the fact's final text and each candidate
  (one ``embed`` call for every fact and passage); the top 3 keep their scores.
- ``llm``: one call per fact with a short chain-of-thought prompt (``prompts/trace``);
  the paper found this picks the right chunk more often than cosine similarity (75 %
  top-1, 91.9 % top-3). An unusable reply is a :class:`FactTrace` with ``error`` and the
  raw output, and no choice: nothing is invented in its place.

:func:`link_sentences` then ties every sentence of the final answer to the facts it states
(see :data:`OVERLAP_MIN`) and to the best chunk of the first of them that has one.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from medverify.decompose import segment
from medverify.errors import ConfigError, MedverifyError, ParseError
from medverify.factcheck.records import Fact, FactTrace, SentenceLink, TraceCandidate
from medverify.kb.embed import Embedder
from medverify.kb.embed_base import normalize
from medverify.llm.facade import Model
from medverify.prompts import load_prompt
from medverify.prompts.untrusted import defuse, fence_id, fenced, load_json_reply, validation_detail
from medverify.records import Passage, Span

STAGE = "trace"
TOP_N = 3
MAX_PASSAGE_CHARS = 4000
MAX_TOKENS = 400

OVERLAP_MIN = 0.6
"""A sentence states a fact when it contains the fact's final text (case and whitespace
ignored), or when at least this share of the fact's content words (words of three or more
letters, and every token with a digit, so doses count) occur in the sentence. A fact that
no sentence contains goes to the one sentence it overlaps most, if that reaches the
threshold; a fact found verbatim goes to every sentence containing it."""

TraceMethod = Literal["similarity", "llm"]

_WORD = re.compile(r"\w+", re.UNICODE)


def candidates(fact: Fact, passages: Mapping[str, Passage]) -> list[Passage]:
    """The passages of the fact's last step that are known, in their order, once each."""
    if not fact.steps:
        return []
    ids = dict.fromkeys(fact.steps[-1].passage_ids)
    return [passages[i] for i in ids if i in passages]


async def trace_facts(facts: Sequence[Fact], passages: Mapping[str, Passage], *,
                      method: TraceMethod = "similarity", model: Model | None = None,
                      embedder: Embedder | None = None) -> list[FactTrace]:
    """One :class:`FactTrace` per fact, in order. Facts without candidates get a trace
    with no best passage. Raises :class:`ConfigError` when the method lacks its tool."""
    pools = [candidates(f, passages) for f in facts]
    if method == "similarity":
        if embedder is None:
            raise ConfigError("tracing by similarity needs an embedder")
        return similarity_traces([f.final_text for f in facts], pools, embedder)
    if method == "llm":
        if model is None:
            raise ConfigError("tracing with --trace llm needs a model (--model)")
        tracer = LLMTracer(model)
        return list(await asyncio.gather(*(tracer.trace(f.final_text, pool)
                                           for f, pool in zip(facts, pools, strict=True))))
    raise ConfigError(f"unknown trace method {method!r}; use similarity or llm")


# -- similarity -----------------------------------------------------------------------------


def similarity_traces(texts: Sequence[str], pools: Sequence[Sequence[Passage]],
                      embedder: Embedder) -> list[FactTrace]:
    """Rank each text's pool by cosine similarity; one embedding call for everything."""
    unique = {p.id: p for pool in pools for p in pool}
    if not unique:
        return [FactTrace(method="similarity") for _ in texts]
    vectors = normalize(embedder.embed([*texts, *(p.text for p in unique.values())]))
    fact_vectors = vectors[: len(texts)]
    row = {pid: len(texts) + i for i, pid in enumerate(unique)}
    return [_ranked(fact_vectors[i], pool, vectors, row) for i, pool in enumerate(pools)]


def _ranked(fact_vector: np.ndarray, pool: Sequence[Passage], vectors: np.ndarray,
            row: Mapping[str, int]) -> FactTrace:
    if not pool:
        return FactTrace(method="similarity")
    scores = [float(vectors[row[p.id]] @ fact_vector) for p in pool]
    order = sorted(range(len(pool)), key=lambda i: -scores[i])[:TOP_N]  # stable on ties
    top = [TraceCandidate(passage_id=pool[i].id, score=round(scores[i], 4)) for i in order]
    return FactTrace(method="similarity", best_passage_id=top[0].passage_id, candidates=top)


# -- LLM re-ranking -------------------------------------------------------------------------


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore")

    reasoning: str | None = None
    best: str | None
    top3: list[str] = []


class LLMTracer:
    """Trace one fact per call with ``prompts/trace`` (temperature 0, JSON reply)."""

    def __init__(self, model: Model, prompt_version: str | None = None) -> None:
        self.model = model
        self.prompt = load_prompt(STAGE, prompt_version)

    @property
    def prompt_version(self) -> str:
        return self.prompt.id

    async def trace(self, fact: str, pool: Sequence[Passage]) -> FactTrace:
        if not pool:
            return FactTrace(method="llm")
        labels = {f"P{i}": p for i, p in enumerate(pool, 1)}
        messages = self.prompt.render(**_prompt_values(fact, labels))
        try:
            completion = await self.model.complete(messages, stage=STAGE, json_mode=True,
                                                   max_tokens=MAX_TOKENS)
        except MedverifyError as exc:
            return FactTrace(method="llm", error=f"trace call failed: {exc}")
        try:
            return parse_trace_reply(completion.text, labels)
        except ParseError as exc:
            return FactTrace(method="llm", raw_output=completion.text,
                             error=f"unparseable trace output: {exc}")


def _prompt_values(fact: str, labels: Mapping[str, Passage]) -> dict[str, str]:
    texts = [p.text[:MAX_PASSAGE_CHARS] for p in labels.values()] + [fact]
    fence = fence_id(texts)
    blocks = "\n".join(fenced(fence, f"{label} | {_describe(p)}", p.text[:MAX_PASSAGE_CHARS])
                       for label, p in labels.items())
    return {"fence": fence, "passages": blocks, "fact": fenced(fence, "FACT", fact)}


def _describe(passage: Passage) -> str:
    parts = [f"title: {passage.title}" if passage.title else "", f"doc: {passage.doc_id}"]
    return defuse(" | ".join(p for p in parts if p).replace("\n", " "))


def parse_trace_reply(raw: str, labels: Mapping[str, Passage]) -> FactTrace:
    """The trace in a model reply, strictly: unknown labels are a :class:`ParseError`.

    The best label leads the candidates even when the model left it out of ``top3``;
    repeats are dropped; at most :data:`TOP_N` candidates are kept."""
    try:
        reply = _Reply.model_validate(load_json_reply(raw, "trace reply"))
    except ValidationError as exc:
        raise ParseError(f"trace reply has the wrong shape: {validation_detail(exc)}",
                         raw=raw) from None
    chosen = [reply.best] if reply.best else []
    unknown = [label for label in [*chosen, *reply.top3] if label not in labels]
    if unknown:
        raise ParseError(f"trace reply names unknown passages {unknown}", raw=raw)
    order = list(dict.fromkeys([*chosen, *reply.top3]))[:TOP_N]
    top = [TraceCandidate(passage_id=labels[label].id) for label in order]
    best = labels[reply.best].id if reply.best else None
    return FactTrace(method="llm", best_passage_id=best, candidates=top,
                     reasoning=(reply.reasoning or "").strip() or None, raw_output=raw)


# -- sentences of the final answer ----------------------------------------------------------


def _norm(text: str) -> str:
    return " ".join(text.casefold().split()).rstrip(" .;:!?")


def content_words(text: str) -> set[str]:
    """Words of three or more characters, and every token with a digit (doses, ages)."""
    words = _WORD.findall(text.casefold())
    return {w for w in words if len(w) >= 3 or any(c.isdigit() for c in w)}


def overlap(fact: str, sentence: str) -> float:
    """1.0 when the sentence contains the fact, else the share of its content words in it."""
    needle = _norm(fact)
    if needle and needle in _norm(sentence):
        return 1.0
    words = content_words(fact)
    return len(words & content_words(sentence)) / len(words) if words else 0.0


def _assign(facts: Sequence[Fact], texts: Sequence[str]) -> list[list[tuple[float, int]]]:
    """Per sentence, the (overlap, fact index) pairs of the facts it states."""
    linked: list[list[tuple[float, int]]] = [[] for _ in texts]
    for index, fact in enumerate(facts):
        scores = [overlap(fact.final_text, t) for t in texts]
        verbatim = [s for s, score in enumerate(scores) if score == 1.0]
        best = max(range(len(texts)), key=scores.__getitem__, default=None)
        targets = verbatim or ([best] if best is not None and scores[best] >= OVERLAP_MIN
                               else [])
        for s in targets:
            linked[s].append((scores[s], index))
    return linked


def link_sentences(final_answer: str, facts: Sequence[Fact],
                   passages: Mapping[str, Passage]) -> list[SentenceLink]:
    """Every sentence (or list item) of the final answer with the facts it states, best
    match first, and the best traced chunk of the first of them that has one."""
    pieces = segment(final_answer)
    linked = _assign(facts, [p.text for p in pieces])
    links = []
    for piece, pairs in zip(pieces, linked, strict=True):
        ordered = [facts[i] for _, i in sorted(pairs, key=lambda pair: (-pair[0], pair[1]))]
        links.append(_link(piece.text, Span(start=piece.start, end=piece.end), ordered,
                           passages))
    return links


def _link(sentence: str, span: Span, facts: Sequence[Fact],
          passages: Mapping[str, Passage]) -> SentenceLink:
    traced = next((f.trace.best_passage_id for f in facts
                   if f.trace and f.trace.best_passage_id in passages), None)
    passage = passages[traced] if traced else None
    return SentenceLink(
        sentence=sentence, span=span, fact_ids=[f.id for f in facts],
        passage_id=passage.id if passage else None,
        doc_id=passage.doc_id if passage else None,
        title=passage.title if passage else None,
        url=passage.url if passage else None,
    )
