"""The generating LLM judge on the in-process provider with a tiny random Qwen2 chat model
and log-probabilities on: it writes garbage, and the judge must neither crash nor record a
signal outside [0, 1]."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from medverify.judge import JudgeItem
from medverify.judge.llm import LLMJudge
from medverify.llm import get_model
from medverify.records import Category, Claim, Passage, Verdict
from medverify.testing.tiny_lm import build_tiny_chat_lm


@pytest.fixture(scope="module")
def tiny_chat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_chat_lm(tmp_path_factory.mktemp("tiny") / "chat")


def test_tiny_local_model_gives_errors_or_finite_signals(tiny_chat: Path) -> None:
    passage = Passage(id="p1", doc_id="d1", text="Metformin is first-line for diabetes.")
    items = [JudgeItem(claim=Claim(id="c0", text="Metformin treats diabetes."),
                       passages=[passage])]

    async def run() -> list[Verdict]:
        async with get_model(f"local:{tiny_chat}") as model:
            return await LLMJudge(model, logprobs=True,
                                  samples=2).judge(items)

    verdicts = asyncio.run(run())
    assert [v.claim_id for v in verdicts] == ["c0"]
    for verdict in verdicts:
        if verdict.category == Category.ERROR:
            assert verdict.error and verdict.signals == {}
            continue
        for name, value in verdict.signals.items():
            assert math.isfinite(value), name
            if name != "samples" and name != "json_retries":
                assert 0.0 <= value <= 1.0, name
