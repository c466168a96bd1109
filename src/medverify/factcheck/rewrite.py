"""Correcting FALSE facts, and the answer that contains them.

Two rewriters share one method, ``rewrite(items, verdicts=None) -> list[Rewrite]`` (one
Rewrite per item, same order), where an item is ``(fact id, fact text, evidence passages)``:

- :class:`LLMRewriter` asks a chat model (prompt ``correct/v1``) to rewrite the facts from
  their evidence, several facts per call with the union of their passages sent once;
- :class:`ExtractiveRewriter` runs offline: a FALSE fact is replaced by the evidence
  sentence that contradicts it (mode ``extractive``); it never pretends to write anything.

A rewrite that fails (call failed, unparseable reply, fact missing from the reply, nothing
to extract) is a :class:`Rewrite` with ``error`` set and ``after`` None, never a made-up text.

The whole answer is then rewritten with :func:`rewrite_answer` (model, prompt
``rewrite_answer/v1``) or, offline, :func:`extractive_answer`, which replaces each FALSE
fact's sentence by a visible marker: ``[corrected from evidence: <evidence sentence>]`` for
a correction, ``[removed: contradicted by the evidence]`` for a fact that was refuted and
could not be corrected.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from medverify.errors import MedverifyError, ParseError
from medverify.factcheck.records import Fact, FactVerdict, Rewrite
from medverify.judge import JudgeItem
from medverify.judge.llm import plan_batches
from medverify.judge.quotes import best_sentence
from medverify.llm.facade import Model
from medverify.prompts import load_prompt
from medverify.prompts.untrusted import defuse, fence_id, fenced, load_json_reply
from medverify.records import Claim, Passage, Verdict

log = logging.getLogger(__name__)

STAGE = "rewrite"
ANSWER_STAGE = "rewrite_answer"
CORRECTED_MARK = "[corrected from evidence: {text}]"
REMOVED_MARK = "[removed: contradicted by the evidence]"

_SPACES = re.compile(r"(?<=\S)[ \t]{2,}")

RewriteItem = tuple[str, str, list[Passage]]
"""(fact id, fact text, the fact's evidence passages)."""


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()).casefold().strip(" .") == " ".join(b.split()).casefold().strip(" .")


def _unchanged(before: str, mode: str, **fields: Any) -> Rewrite:
    return Rewrite(before=before, mode=mode,  # type: ignore[arg-type]
                   error="the rewrite repeats the fact unchanged", **fields)


# --------------------------------------------------------------------------- LLM rewriter


class LLMRewriter:
    """Rewrite FALSE facts from their evidence with a chat model (``prompts/correct``).

    Facts are batched ``facts_per_call`` per call while the union of their passages stays
    within ``max_passages`` (facts with overlapping evidence share it, sent once)."""

    name = "llm"

    def __init__(self, model: Model, *, facts_per_call: int = 8, max_passages: int = 24,
                 max_passage_chars: int = 4000, prompt_version: str = "v1") -> None:
        self.model = model
        self.facts_per_call = facts_per_call
        self.max_passages = max_passages
        self.max_passage_chars = max_passage_chars
        self.prompt = load_prompt("correct", prompt_version)

    @property
    def prompt_version(self) -> str:
        return self.prompt.id

    async def rewrite(self, items: Sequence[RewriteItem],
                      verdicts: Mapping[str, Verdict] | None = None) -> list[Rewrite]:
        """One Rewrite per item, in order (``verdicts`` is not needed here)."""
        judge_items = [JudgeItem(claim=Claim(id=fid, text=text), passages=passages)
                       for fid, text, passages in items]
        out: dict[str, Rewrite] = {}
        batches = plan_batches(judge_items, self.facts_per_call, self.max_passages)
        done = await asyncio.gather(*(
            self._batch([item for _, item in b.items], list(b.passages.values()))
            for b in batches))
        for rewrites in done:
            out.update(rewrites)
        no_evidence = "no evidence passage to rewrite the fact from"
        return [out.get(fid) or self._failed(text, no_evidence, None) for fid, text, _ in items]

    async def _batch(self, items: list[JudgeItem],
                     passages: list[Passage]) -> dict[str, Rewrite]:
        labels = {f"P{i}": p for i, p in enumerate(passages, 1)}
        messages = self.prompt.render(**self._values(items, labels))
        raw: str | None = None
        try:
            completion = await self.model.complete(messages, stage=STAGE, json_mode=True)
            raw = completion.text
            parsed = parse_rewrite_reply(raw, [i.claim.id for i in items])
        except MedverifyError as exc:
            what = "rewrite call failed" if raw is None else "unparseable rewrite reply"
            return {i.claim.id: self._failed(i.claim.text, f"{what}: {exc}", raw) for i in items}
        return {i.claim.id: self._rewrite(i.claim.text, parsed[i.claim.id], labels, raw)
                for i in items}

    def _values(self, items: list[JudgeItem], labels: dict[str, Passage]) -> dict[str, str]:
        texts = {label: p.text[: self.max_passage_chars] for label, p in labels.items()}
        fence = fence_id([*texts.values(), *(i.claim.text for i in items)])
        return {
            "fence": fence,
            "passages": "\n".join(fenced(fence, f"{label} | {_describe(labels[label])}", text)
                                  for label, text in texts.items()),
            "facts": "\n".join(fenced(fence, defuse(i.claim.id), i.claim.text) for i in items),
        }

    def _rewrite(self, before: str, parsed: tuple[str, str | None] | str,
                 labels: dict[str, Passage], raw: str) -> Rewrite:
        if isinstance(parsed, str):
            return self._failed(before, f"unparseable rewrite reply: {parsed}", raw)
        after, label = parsed
        passage = labels.get(label) if label else None
        fields: dict[str, Any] = {"evidence_passage_id": passage.id if passage else None,
                                  "raw_output": raw, "prompt_version": self.prompt_version}
        if _same(before, after):
            return _unchanged(before, "llm", **fields)
        return Rewrite(before=before, after=after, mode="llm", **fields)

    def _failed(self, before: str, error: str, raw: str | None) -> Rewrite:
        log.warning("rewrite of %r failed: %s", before[:60], error)
        return Rewrite(before=before, mode="llm", error=error, raw_output=raw,
                       prompt_version=self.prompt_version)


def _describe(passage: Passage) -> str:
    parts = [f"title: {passage.title}" if passage.title else "", f"doc: {passage.doc_id}"]
    return defuse(" | ".join(p for p in parts if p).replace("\n", " "))


def parse_rewrite_reply(raw: str, ids: Sequence[str]) -> dict[str, tuple[str, str | None] | str]:
    """Per fact id: (rewritten text, passage label or None), or what was wrong with its
    entry. Raises ParseError when the reply as a whole is unusable."""
    data = load_json_reply(raw, "rewrite reply")
    entries = data.get("facts") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ParseError("expected an object with a 'facts' list", raw=raw)
    parsed: dict[str, tuple[str, str | None] | str] = dict.fromkeys(
        ids, "no rewrite for this fact in the reply")
    seen: set[str] = set()
    for entry in entries:
        fid = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(fid, str) or fid not in parsed:
            continue
        parsed[fid] = "duplicate entries for this fact" if fid in seen else _entry(entry)
        seen.add(fid)
    return parsed


def _entry(entry: dict[str, Any]) -> tuple[str, str | None] | str:
    text = entry.get("rewritten")
    if not isinstance(text, str) or not text.strip():
        return "'rewritten' must be a non-empty string"
    label = entry.get("passage")
    return text.strip(), label if isinstance(label, str) else None


# --------------------------------------------------------------------------- extractive

ON_TOPIC_WORDS = 2
ON_TOPIC_SHARE = 0.25
_CONTENT = re.compile(r"[^\W_]{3,}|\d+(?:\.\d+)?")
_MINOR = frozenset({"the", "and", "for", "with", "are", "was", "were", "that", "this", "from",
                    "has", "have", "its", "not", "can", "may", "some", "people"})


def _content(text: str) -> set[str]:
    return {w for w in _CONTENT.findall(text.casefold()) if w not in _MINOR}


def on_topic(fact: str, sentence: str) -> bool:
    """Whether an evidence sentence is about the fact: it shares at least
    ``ON_TOPIC_WORDS`` content words with it, and at least ``ON_TOPIC_SHARE`` of the
    fact's. A judge may find a contradiction in an unrelated passage; replacing the fact by
    a sentence on another subject would be no correction."""
    words = _content(fact)
    shared = len(words & _content(sentence))
    return shared >= ON_TOPIC_WORDS and shared >= ON_TOPIC_SHARE * len(words)


class ExtractiveRewriter:
    """Offline correction: a FALSE fact becomes the evidence sentence that contradicts it.

    The sentence is the judge's counterfactual quote when it gave one, else the sentence of
    the contradicting passage sharing the most words with the fact (``best_sentence``)."""

    name = "extractive"
    prompt_version: str | None = None

    async def rewrite(self, items: Sequence[RewriteItem],
                      verdicts: Mapping[str, Verdict] | None = None) -> list[Rewrite]:
        verdicts = verdicts or {}
        return [self.one(text, passages, verdicts.get(fid)) for fid, text, passages in items]

    def one(self, text: str, passages: Sequence[Passage], verdict: Verdict | None) -> Rewrite:
        analysis = verdict.counterfactual if verdict is not None else None
        passage = None
        if analysis is not None and analysis.counts and analysis.passage_id:
            passage = next((p for p in passages if p.id == analysis.passage_id), None)
        quote = analysis.shown_quote if analysis is not None and analysis.counts else None
        sentence = quote or (best_sentence(text, passage.text) if passage else None)
        if not sentence:
            return Rewrite(before=text, mode="extractive",
                           error="no contradicting evidence sentence")
        if not on_topic(text, sentence):
            return Rewrite(before=text, mode="extractive", evidence_quote=sentence,
                           evidence_passage_id=passage.id if passage else None,
                           error="no contradicting evidence sentence on the fact's topic")
        passage_id = passage.id if passage else analysis.passage_id if analysis else None
        fields = {"evidence_passage_id": passage_id, "evidence_quote": sentence}
        if _same(text, sentence):
            return _unchanged(text, "extractive", **fields)
        return Rewrite(before=text, after=sentence, mode="extractive", **fields)


# --------------------------------------------------------------------------- the answer


def answer_edits(facts: Sequence[Fact]) -> list[tuple[Fact, str | None]]:
    """What the final answer must change, for each fact first judged FALSE (contradicted
    and not supported): its corrected text when the correction held (final verdict TRUE,
    UNVERIFIABLE, or ERROR: a failed re-check is not a verdict); None (remove it) when it
    was refuted and not corrected. Facts whose
    evidence conflicts (JUDGMENT_ERROR) are UNVERIFIABLE from the start and left as they
    are."""
    edits: list[tuple[Fact, str | None]] = []
    for fact in facts:
        if fact.initial_verdict is not FactVerdict.FALSE:
            continue
        # a corrected fact whose re-check failed (ERROR) keeps its correction: a failed
        # judge call is not a verdict against it
        held = fact.final_verdict in (FactVerdict.TRUE, FactVerdict.UNVERIFIABLE,
                                      FactVerdict.ERROR)
        edits.append((fact, fact.final_text if fact.corrected and held else None))
    return edits


def locate(answer_text: str, fact: Fact) -> tuple[int, int] | None:
    """Where the fact's sentence is in the answer: the claim's span when set, else the
    claim text itself, else the answer sentence sharing the most words with it."""
    span = fact.claim.span
    if span is not None and span.end <= len(answer_text):
        return span.start, span.end
    for needle in (fact.claim.text, best_sentence(fact.claim.text, answer_text)):
        at = answer_text.find(needle) if needle else -1
        if needle and at >= 0:
            return at, at + len(needle)
    return None


def replace_facts(answer_text: str, facts: Sequence[Fact], texts: Mapping[str, str | None]) -> str:
    """``answer_text`` with the sentence of every fact in ``texts`` rebuilt: the fact's text
    becomes ``texts[fact.id]`` (None: left out) and other facts of the same sentence keep
    their claim text. Facts whose places overlap (one found verbatim inside the sentence
    another was matched to) are rebuilt together. Facts that cannot be located are
    skipped."""
    located = sorted(((where, fact) for fact in facts
                      if (where := locate(answer_text, fact)) is not None),
                     key=lambda item: item[0])
    regions: list[tuple[int, int, list[Fact]]] = []
    for (start, stop), fact in located:
        if regions and start < regions[-1][1]:
            first, last, group = regions[-1]
            regions[-1] = (first, max(last, stop), [*group, fact])
        else:
            regions.append((start, stop, [fact]))
    out, end = [], len(answer_text)
    for start, stop, group in reversed(regions):
        if not any(f.id in texts for f in group):
            continue  # nothing changes here
        pieces = [texts.get(f.id, f.claim.text) for f in group]
        out.append(answer_text[stop:end])
        out.append(" ".join(p for p in pieces if p))
        end = start
    out.append(answer_text[:end])
    return _tidy("".join(reversed(out)))


def _tidy(text: str) -> str:
    """Spaces doubled by a removal collapsed (indentation kept), line ends trimmed."""
    lines = [_SPACES.sub(" ", line).rstrip() for line in text.split("\n")]
    return "\n".join(lines).strip()


def extractive_answer(answer_text: str, facts: Sequence[Fact]) -> str:
    """The answer with each FALSE fact's sentence replaced by ``[corrected from evidence:
    <sentence>]`` (its extractive correction) or ``[removed: contradicted by the evidence]``
    (refuted, nothing to replace it with)."""
    texts = {fact.id: CORRECTED_MARK.format(text=after) if after else REMOVED_MARK
             for fact, after in answer_edits(facts)}
    return replace_facts(answer_text, facts, texts) if texts else answer_text


def _edit_block(fence: str, n: int, fact: Fact, after: str | None, answer: str) -> str:
    where = locate(answer, fact)
    sentence = answer[where[0]:where[1]] if where else fact.claim.text
    body = f"SENTENCE: {sentence}\nWAS: {fact.claim.text}"
    if after is not None:
        body += f"\nNOW: {after}"
    return fenced(fence, f"E{n} {'replace' if after is not None else 'remove'}", body)


async def rewrite_answer(model: Model, question: str | None, answer: str,
                         facts: Sequence[Fact], *, prompt_version: str = "v1",
                         max_tokens: int | None = None) -> tuple[str, str]:
    """The answer rewritten by the model to include the corrected facts and drop the refuted
    ones (``prompts/rewrite_answer``). Returns (text, raw reply); raises ParseError when
    the reply is unusable and ProviderError when the call fails."""
    prompt = load_prompt(ANSWER_STAGE, prompt_version)
    edits = answer_edits(facts)
    fence = fence_id([answer, question or "", *(f.claim.text for f, _ in edits),
                      *(a for _, a in edits if a)])
    messages = prompt.render(
        fence=fence,
        question=fenced(fence, "question", question or "(no question given)"),
        answer=fenced(fence, "answer", answer),
        edits="\n".join(_edit_block(fence, n, f, a, answer) for n, (f, a) in enumerate(edits, 1)),
    )
    completion = await model.complete(messages, stage=ANSWER_STAGE, json_mode=True,
                                      max_tokens=max_tokens)
    data = load_json_reply(completion.text, "rewrite_answer reply")
    text = data.get("answer") if isinstance(data, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise ParseError("expected an object with a non-empty 'answer' string",
                         raw=completion.text)
    return text.strip(), completion.text
