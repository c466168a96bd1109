"""Generated benchmark questions: one answerable question per reference document (SourceCheckup).

As in the paper, a model reads one reference document (e.g. a patient information page)
and writes one question a patient could ask that the document answers; the document stays
with the question as its ``reference``. The document is untrusted text: it goes into the
prompt inside a content-derived fence, and the reply is parsed strictly as
``{"question": "..."}``. One document's failure never stops the others: each result says
``ok``, ``invalid`` (the raw output is kept) or ``error`` (the call failed after the model
facade's retries). :meth:`QuestionGenerator.generate_to_file` appends each result as it
comes, so an interrupted run resumes without asking again for documents already done.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from medverify.bench.records import GeneratedQuestion, GenerationStatus, Question
from medverify.errors import ParseError, ProviderError
from medverify.files import append_record, read_records
from medverify.kb.loaders import LoadReport, iter_documents
from medverify.llm.base import Message
from medverify.llm.facade import Model
from medverify.prompts import load_prompt
from medverify.prompts.untrusted import (
    defuse,
    fence_id,
    fenced,
    load_json_reply,
    validation_detail,
)
from medverify.records import Document

STAGE = "bench_question"
MAX_QUESTION_CHARS = 600
MAX_TOKENS = 400
_MENTIONS_DOCUMENT = re.compile(
    r"\b(?:the|this|that|above|given|provided)\s+(?:document|text|article|passage|page)\b",
    re.IGNORECASE)


def read_documents(paths: Sequence[Path]) -> tuple[list[Document], LoadReport]:
    """Reference documents from files and directories (txt, md, html, pdf, MedQuAD XML and
    JSONL of ``{doc_id, title, text, url}``). A repeated doc_id is skipped and reported."""
    report = LoadReport()
    documents: list[Document] = []
    seen: set[str] = set()
    for document in iter_documents(paths, report):
        if document.doc_id in seen:
            report.skip(document.doc_id, "duplicate doc_id (the first document is kept)")
            report.documents -= 1
            continue
        seen.add(document.doc_id)
        documents.append(document)
    return documents, report


class _Reply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str


class QuestionGenerator:
    """Writes one question per document with ``model`` (stage ``bench_question``)."""

    def __init__(self, model: Model, *, prompt_version: str = "v1", max_doc_chars: int = 12000,
                 concurrency: int = 8) -> None:
        if max_doc_chars < 1 or concurrency < 1:
            raise ValueError("max_doc_chars and concurrency must be at least 1")
        self.model = model
        self.prompt = load_prompt(STAGE, prompt_version)
        self.max_doc_chars = max_doc_chars
        self.concurrency = concurrency

    @property
    def prompt_version(self) -> str:
        """The prompt's id, e.g. ``bench_question/v1`` (as the judge and the asker report it)."""
        return self.prompt.id

    async def generate(self, documents: Sequence[Document], *, source: str
                       ) -> list[GeneratedQuestion]:
        """One result per document, in input order; never raises for one document."""
        limit = asyncio.Semaphore(self.concurrency)

        async def one(document: Document) -> GeneratedQuestion:
            async with limit:
                return await self.generate_one(document, source=source)

        return await _gather_all([one(d) for d in documents])

    async def generate_to_file(self, documents: Sequence[Document], *, source: str,
                               out: Path) -> list[GeneratedQuestion]:
        """Like :meth:`generate`, appending each result to ``out`` (JSONL) as it comes.

        Documents whose doc_id already has an ``ok`` result in ``out`` for the same source
        and the same document text are not asked again (their stored result is returned);
        ``invalid`` and ``error`` ones, and documents that changed, are asked (again).
        """
        texts = {d.doc_id: d.text for d in documents}
        done = {g.doc_id: g for g in load_generated(out)
                if g.status == GenerationStatus.OK and _still_valid(g, texts, source)}
        pending = [d for d in documents if d.doc_id not in done]
        limit = asyncio.Semaphore(self.concurrency)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a", encoding="utf-8") as handle:

            async def one(document: Document) -> GeneratedQuestion:
                async with limit:
                    result = await self.generate_one(document, source=source)
                append_record(handle, result)
                return result

            fresh = await _gather_all([one(d) for d in pending])
        results = {g.doc_id: g for g in fresh} | done
        return [results[d.doc_id] for d in documents]

    async def generate_one(self, document: Document, *, source: str) -> GeneratedQuestion:
        """The question for one document (status ok, invalid or error)."""
        text = document.text[: self.max_doc_chars]
        if not text.strip():
            return self._result(document, GenerationStatus.INVALID, error="document has no text")
        try:
            completion = await self.model.complete(
                self.messages(document), stage=STAGE, json_mode=True, max_tokens=MAX_TOKENS,
                temperature=0.0)
        except ProviderError as exc:
            return self._result(document, GenerationStatus.ERROR, error=str(exc))
        try:
            question_text = parse_question(completion.text)
        except ParseError as exc:
            return self._result(document, GenerationStatus.INVALID, raw_output=completion.text,
                                error=str(exc))
        meta: dict[str, object] = {"model": self.model.spec, "prompt_version": self.prompt_version}
        if len(text) < len(document.text):
            meta.update(reference_truncated=True, reference_chars_used=len(text))
        question = Question(id=f"{source}:{document.doc_id}", text=question_text, source=source,
                            reference=document, meta=meta)
        return self._result(document, GenerationStatus.OK, question=question,
                            raw_output=completion.text)

    def messages(self, document: Document) -> list[Message]:
        """The prompt for one document: the (cut) text inside a content-derived fence."""
        text = document.text[: self.max_doc_chars]
        header = defuse(" ".join((document.title or document.doc_id).split()))[:200]
        fence = fence_id([text, header])
        return self.prompt.render(fence=fence, document=fenced(fence, f"D1 | {header}", text))

    def _result(self, document: Document, status: GenerationStatus, *,
                question: Question | None = None, raw_output: str | None = None,
                error: str | None = None) -> GeneratedQuestion:
        return GeneratedQuestion(doc_id=document.doc_id, status=status, question=question,
                                 raw_output=raw_output, error=error,
                                 prompt_version=self.prompt_version)


async def _gather_all(jobs: Sequence[Awaitable[GeneratedQuestion]]) -> list[GeneratedQuestion]:
    """Run ``jobs`` concurrently; if one raises (or the run is cancelled), cancel the rest
    before re-raising, so that nothing runs on after its caller has gone."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def parse_question(raw: str) -> str:
    """The question in a ``{"question": "..."}`` reply; ParseError when it is not one, or the
    question is empty, too long or refers to "the document"."""
    value = load_json_reply(raw, "question reply")
    try:
        reply = _Reply.model_validate(value)
    except ValidationError as exc:
        raise ParseError(f"question reply: {validation_detail(exc)}", raw=raw) from None
    question = " ".join(reply.question.split())
    if not question:
        raise ParseError("question reply: the question is empty", raw=raw)
    if len(question) > MAX_QUESTION_CHARS:
        raise ParseError(f"question reply: the question has {len(question)} characters "
                         f"(at most {MAX_QUESTION_CHARS})", raw=raw)
    if _MENTIONS_DOCUMENT.search(question):
        raise ParseError("question reply: the question refers to the document itself", raw=raw)
    return question


def load_generated(path: Path, warnings: list[str] | None = None) -> list[GeneratedQuestion]:
    """The results stored in a generation file, the last one per doc_id (missing file: [])."""
    return read_records(Path(path), GeneratedQuestion, warnings, key=lambda g: g.doc_id)


def generated_questions(results: Sequence[GeneratedQuestion]) -> list[Question]:
    """The questions of the ``ok`` results, in order."""
    return [r.question for r in results
            if r.status == GenerationStatus.OK and r.question is not None]


def _still_valid(result: GeneratedQuestion, texts: dict[str, str], source: str) -> bool:
    """A stored question still answers this run: same source, same document text."""
    question = result.question
    if question is None or question.source != source or result.doc_id not in texts:
        return False
    return question.reference is None or question.reference.text == texts[result.doc_id]
