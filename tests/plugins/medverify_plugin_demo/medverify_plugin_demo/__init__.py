"""A demo medverify plugin (see docs/plugins.md).

- ``always-nei`` (judge): finds neither support nor contradiction for any claim, so every
  claim ends as COVERAGE_GAP. Deterministic, offline.
- ``one-per-sentence`` (decomposer): every sentence of the answer is one claim, with its
  exact span in the answer text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from medverify.judge import JudgeItem
from medverify.records import Analysis, Answer, Claim, Span, Verdict

_SENTENCE = re.compile(r"[^.!?\n]*[^.!?\s][^.!?\n]*[.!?]*")


class AlwaysNEIJudge:
    """Says "not enough information" about every claim."""

    name = "always-nei"
    prompt_version: str | None = None

    @classmethod
    def from_config(cls, config: Any, model: Any) -> AlwaysNEIJudge:
        """The factory medverify calls: ``factory(config, model)``. Neither is needed here."""
        return cls()

    async def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        reason = "the always-nei demo judge never decides"
        return [
            Verdict(
                claim_id=item.claim.id,
                passage_ids=[p.id for p in item.passages],
                factual=Analysis(holds=False, reason=reason),
                counterfactual=Analysis(holds=False, reason=reason),
                judge=self.name,
            )
            for item in items
        ]


class SentenceDecomposer:
    """One claim per sentence, spans into the answer text."""

    name = "one-per-sentence"
    prompt_version: str | None = None

    @classmethod
    def from_config(cls, config: Any, model: Any) -> SentenceDecomposer:
        """The factory medverify calls: ``factory(config, model)``."""
        return cls()

    async def decompose(self, answer: Answer) -> list[Claim]:
        claims = []
        for match in _SENTENCE.finditer(answer.text):
            start = match.start() + len(match.group()) - len(match.group().lstrip())
            claims.append(Claim(id=f"c{len(claims) + 1}", text=answer.text[start:match.end()],
                                span=Span(start=start, end=match.end()), decomposer=self.name))
        return claims
