"""Scripted judge replies: turn a rule into valid judge JSON for whatever claims a judge
prompt contains, so tests and benchmarks can run the real LLM judge against a fake model
(in-process ``ScriptedProvider`` or the local ``FakeChatServer``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from medverify.llm.base import ChatRequest
from medverify.records import Analysis, Verdict
from medverify.terms import coverage, key_terms

Decision = tuple[bool, bool]
"""(supported, contradicted) for one claim."""

Rule = Callable[[str, dict[str, str]], Decision]
"""Decides a claim given its text and the fenced passages {label: text}."""

_FENCE = re.compile(r"\(fence (F[0-9a-f]{12})\)")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def prompt_blocks(prompt: str) -> tuple[dict[str, str], dict[str, str]]:
    """The fenced passages and claims of a judge prompt, by label."""
    passages: dict[str, str] = {}
    claims: dict[str, str] = {}
    found = _FENCE.search(prompt)
    if not found:
        return passages, claims
    opening, closing = f"<<<{found.group(1)} ", f"\n<<<END {found.group(1)}>>>"
    for block in prompt.split(opening)[1:]:
        header, _, rest = block.partition(">>>\n")
        label = header.split(" ", 1)[0]
        text = rest.split(closing, 1)[0]
        (passages if label.startswith("P") else claims)[label] = text
    return passages, claims


def judge_reply(prompt: str, rule: Rule) -> str:
    """Valid judge JSON for every claim in ``prompt``, decided by ``rule``."""
    passages, claims = prompt_blocks(prompt)
    results = []
    for label, text in claims.items():
        supported, contradicted = rule(text, passages)
        cited, quote = _evidence(passages, text)
        results.append(
            {
                "claim_id": label,
                "factual": {
                    "reasoning": "scripted",
                    "supported": supported,
                    "passage": cited if supported else None,
                    "quote": quote if supported else None,
                },
                "counterfactual": {
                    "negation": f"not: {text}",
                    "reasoning": "scripted",
                    "contradicted": contradicted,
                    "passage": cited if contradicted else None,
                    "quote": quote if contradicted else None,
                },
            }
        )
    return json.dumps({"results": results})


def _evidence(passages: dict[str, str], claim: str) -> tuple[str | None, str | None]:
    """The passage label and verbatim sentence that share the most of the claim's key
    content: a real judge must quote words about the claim from the passage it names, or
    its analysis does not count (``judge.evidence.check_quote``). (None, None) without
    passages."""
    wanted = key_terms(claim)
    best: tuple[float, str | None, str | None] = (-1.0, None, None)
    for label, text in passages.items():
        for sentence in _SENTENCE.split(text):
            score = coverage(wanted, key_terms(sentence))
            if sentence.strip() and score > best[0]:
                best = (score, label, sentence.strip())
    return best[1], best[2]


def _user_text(request: ChatRequest | dict[str, Any]) -> str:
    """The judge prompt of a request: the last message holding a fence (a retry ends with a
    note after it), else the last message."""
    if isinstance(request, ChatRequest):
        texts = [m.content for m in request.messages]
    else:
        texts = [str(m["content"]) for m in request["messages"]]
    return next((t for t in reversed(texts) if _FENCE.search(t)), texts[-1])


def scripted_judge(rule: Rule) -> Callable[[ChatRequest | dict[str, Any]], str]:
    """A reply function for ``ScriptedProvider`` or ``FakeChatServer`` that answers judge
    prompts with ``rule``."""
    return lambda request: judge_reply(_user_text(request), rule)


def keyword_rule(supported: str = "", contradicted: str = "") -> Rule:
    """A rule for examples: a claim is supported when it contains ``supported`` and
    contradicted when it contains ``contradicted`` (case-insensitive; empty never matches)."""

    def rule(claim: str, _passages: dict[str, str]) -> Decision:
        text = claim.casefold()
        return (
            bool(supported) and supported.casefold() in text,
            bool(contradicted) and contradicted.casefold() in text,
        )

    return rule


class WordJudge:
    """An in-process judge for tests of stages above the judge seam: a claim is supported
    when every word of it occurs in its passages, never contradicted. ``fail(item)`` may
    return an error message, which makes that item's verdict an ERROR. Items judged are
    kept in ``items``."""

    name = "words"
    prompt_version = None

    def __init__(self, fail: Callable[[Any], str | None] | None = None) -> None:
        self.items: list[Any] = []
        self._fail = fail

    async def judge(self, items: Sequence[Any]) -> list[Verdict]:
        self.items.extend(items)
        return [self._verdict(item) for item in items]

    def _verdict(self, item: Any) -> Verdict:
        error = self._fail(item) if self._fail else None
        if error:
            return Verdict(claim_id=item.claim.id, error=error)
        text = " ".join(p.text.lower() for p in item.passages)
        holds = all(w in text for w in item.claim.text.lower().rstrip(".").split())
        return Verdict(claim_id=item.claim.id, factual=Analysis(holds=holds),
                       counterfactual=Analysis(holds=False))


def word_judge(config: Any = None, model: Any = None) -> WordJudge:
    """A judge-registry factory of :class:`WordJudge` (``JUDGES.register("words",
    word_judge)``): importable by name, so worker processes (Ray) can make the same judge."""
    return WordJudge()
