"""The risk stage: rephrasing failures degrade to missing features, never abort."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from medverify.errors import ProviderError
from medverify.llm.facade import Model
from medverify.risk.records import TokenStep, TokenTrace, TopToken
from medverify.risk.scorers import ScoreItem
from medverify.risk.stage import RiskStage, RiskText, all_failed
from medverify.testing import ScriptedProvider


class WordScorer:
    """One step per word, the same distribution everywhere (no model)."""

    id = "fake:words"
    k = 2

    def __init__(self) -> None:
        self.items: list[ScoreItem] = []

    async def score(self, items: Sequence[ScoreItem]) -> list[TokenTrace]:
        self.items.extend(items)
        return [self._trace(item) for item in items]

    def _trace(self, item: ScoreItem) -> TokenTrace:
        steps, start = [], 0
        for word in item.answer.split():
            start = item.answer.index(word, start)
            top = [TopToken(token=word, logprob=-0.2), TopToken(token="x", logprob=-2.0)]
            steps.append(TokenStep(token=word, start=start, end=start + len(word),
                                   logprob=-0.2, rank=1, top=top))
            start += len(word)
        return TokenTrace(scorer=self.id, question=item.question, answer=item.answer, k=2,
                          steps=steps, prompt_variant=item.prompt_variant)


def test_a_failing_rephraser_leaves_rephrasing_features_missing() -> None:
    scorer = WordScorer()
    broken = Model(ScriptedProvider([ProviderError("down")] * 10, name="down"))
    stage = RiskStage([scorer], rephrasings=3, rephraser=broken)  # type: ignore[list-item]
    texts = [RiskText(id="a", text="Metformin lowers glucose.", question="What?"),
             RiskText(id="b", text="Aspirin thins blood.", question="And?")]
    rows = asyncio.run(stage.features(texts))
    assert [r.unit_id for r in rows] == ["a", "b"]
    assert all(any(name.startswith("reph.") for name in r.missing) for r in rows)
    assert not any(all_failed(r, 1) for r in rows)
    assert [i.prompt_variant for i in scorer.items] == ["original", "original"]
    assert list(rows[0].values) == stage.schema.names
