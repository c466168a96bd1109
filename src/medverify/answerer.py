"""The RAG answer (Vladika et al. 2025, step 1): the top chunks for a question, and an
answer generated from them alone.

:class:`RagAnswerer` retrieves the ``top_k`` chunks for the question from a knowledge base,
shows them to the model numbered ``[1]..[k]`` with their titles (fenced as untrusted text,
prompt ``answer``) and asks for a short plain-text answer at temperature 0. The chunks are
kept on the :class:`RagAnswer` (the record this stage produces; the fact-checking, which
also re-exports it from ``medverify.factcheck.records``, shows what the answer was
generated from). A failed model call is recorded as
the answer's ``error``, never raised; :func:`answer_question` is the one-call entry point.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from medverify.config import Config
from medverify.errors import ConfigError, InputError, ProviderError
from medverify.harness import open_kb
from medverify.kb import KnowledgeBase
from medverify.llm.base import Completion, Message
from medverify.llm.facade import Model, model_from_config
from medverify.prompts import load_prompt
from medverify.prompts.untrusted import defuse, fence_id, fenced
from medverify.records import Passage, Usage
from medverify.retrieve import Mode, Retriever

STAGE = "answer"
NO_EXCERPTS = "(no excerpt was retrieved for this question)"


class RagAnswer(BaseModel):
    """``medverify answer``: the answer generated from the top chunks for the question."""

    model_config = ConfigDict(extra="forbid")

    question: str
    text: str
    chunks: list[Passage] = Field(default_factory=list)
    model: str = ""
    prompt_version: str = ""
    usage: Usage = Field(default_factory=Usage)
    raw_output: str | None = None
    error: str | None = None


def usage_of(completion: Completion) -> Usage:
    """The size of one call: its prompt and completion tokens, as a real call (``calls``)
    or one served from the request cache (``cached_calls``).

    Unlike :class:`~medverify.llm.facade.UsageLedger`, which counts a cache hit as free,
    the tokens are kept for a cached call, so the size of a call is known on a rerun too."""
    return Usage(
        calls=0 if completion.cached else 1,
        cached_calls=1 if completion.cached else 0,
        prompt_tokens=completion.usage.prompt_tokens,
        completion_tokens=completion.usage.completion_tokens,
    )


def excerpt_header(number: int, passage: Passage) -> str:
    """``[n] title (doc id)``, defused: a title cannot close a fence."""
    title = passage.title or passage.doc_id
    return defuse(f"[{number}] {title} (doc {passage.doc_id})")


def render_excerpts(fence: str, chunks: Sequence[Passage]) -> str:
    """The chunks numbered from 1, each in its own fence."""
    if not chunks:
        return NO_EXCERPTS
    return "\n\n".join(fenced(fence, excerpt_header(i, p), p.text)
                       for i, p in enumerate(chunks, start=1))


def check_question(question: str) -> str:
    """The question stripped; :class:`InputError` when there is nothing to answer."""
    text = question.strip()
    if not text:
        raise InputError("the question is empty: nothing to answer")
    if "\x00" in text:
        raise InputError("the question contains NUL bytes: is it a binary file?")
    return text


class RagAnswerer:
    """Answers questions from the top chunks of one knowledge base with one model."""

    def __init__(self, kb: KnowledgeBase, model: Model, *, top_k: int = 7,
                 max_tokens: int = 1024, prompt_version: str = "v1",
                 mode: Mode | None = None) -> None:
        if top_k < 1:
            raise ConfigError(f"top_k must be at least 1, not {top_k}")
        self.kb = kb
        self.model = model
        self.top_k = top_k
        self.max_tokens = max_tokens
        self.mode: Mode = mode or kb.retrieval.mode
        self._prompt = load_prompt(STAGE, prompt_version)

    @property
    def prompt_version(self) -> str:
        """The prompt id, e.g. ``answer/v1``."""
        return self._prompt.id

    async def retrieve(self, question: str) -> list[Passage]:
        """The top ``top_k`` chunks for the question (the search runs in a thread)."""
        [chunks] = await asyncio.to_thread(Retriever(self.kb).search_many, [question],
                                           self.top_k, self.mode)
        return chunks

    def messages(self, question: str, chunks: Sequence[Passage]) -> list[Message]:
        """The prompt: the question and the numbered chunks, all fenced."""
        fence = fence_id([question, *(p.text for p in chunks)])
        return self._prompt.render(
            question=fenced(fence, "question", question),
            excerpts=render_excerpts(fence, chunks),
        )

    async def answer(self, question: str) -> RagAnswer:
        """Retrieve, then generate. Raises :class:`InputError` for an empty question; a
        model failure gives an answer with ``error`` set and empty ``text``."""
        question = check_question(question)
        chunks = await self.retrieve(question)
        result = RagAnswer(question=question, text="", chunks=chunks, model=self.model.spec,
                           prompt_version=self.prompt_version)
        try:
            completion = await self.model.complete(
                self.messages(question, chunks), stage=STAGE, temperature=0.0,
                max_tokens=self.max_tokens)
        except ProviderError as exc:
            return result.model_copy(update={"error": f"{STAGE}: {exc}"})
        return _with_completion(result, completion)


def _with_completion(result: RagAnswer, completion: Completion) -> RagAnswer:
    text = completion.text.strip()
    error = None if text else f"{STAGE}: the model returned an empty reply"
    return result.model_copy(update={"text": text, "usage": usage_of(completion),
                                     "raw_output": completion.text, "error": error})


def _open_kb(kb: KnowledgeBase | str | Path | None,
             config: Config) -> contextlib.AbstractContextManager[KnowledgeBase]:
    """The KB given (left open), or the one at the path given or configured (closed after)."""
    if isinstance(kb, KnowledgeBase):
        return contextlib.nullcontext(kb)
    return open_kb(config.model_copy(update={"kb": Path(kb)}) if kb is not None else config)


async def aanswer_question(question: str, *, kb: KnowledgeBase | str | Path | None = None,
                           model_spec: str | None = None,
                           config: Config | None = None) -> RagAnswer:
    """Answer one question from a knowledge base (``kb``, else ``config.kb``) with a model
    (``model_spec``, else ``config.model``); settings from ``config.answer``."""
    config = config or Config.load()
    spec = model_spec or config.model
    if not spec:
        raise ConfigError("answering a question generates text: give a model spec "
                          "(e.g. openai:gpt-4o-mini; see docs/models.md)")
    question = check_question(question)
    with _open_kb(kb, config) as base:
        async with model_from_config(config, spec) as model:
            answerer = RagAnswerer(base, model, top_k=config.answer.top_k,
                                   max_tokens=config.answer.max_tokens)
            return await answerer.answer(question)


def answer_question(question: str, *, kb: KnowledgeBase | str | Path | None = None,
                    model_spec: str | None = None, config: Config | None = None) -> RagAnswer:
    """Synchronous twin of :func:`aanswer_question` (opens and closes what it needs)."""
    return asyncio.run(aanswer_question(question, kb=kb, model_spec=model_spec, config=config))
