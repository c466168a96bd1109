"""Risk-guided compute (medverify.risk.compute): which items get the expensive path, the
accuracy-vs-budget curve and its exact baselines, the guided runner, the CLI."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from medverify.cli import main
from medverify.risk.compute import (
    ComputeItem,
    budget_curve,
    curve_svg,
    escalate,
    n_escalated,
    run_guided,
)


def _items(n: int, seed: int, informative: bool) -> list[ComputeItem]:
    """Cheap right 60 % of the time, expensive 90 %; an informative risk is high exactly
    when the cheap answer is wrong (plus noise)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        cheap = rng.random() < 0.6
        expensive = rng.random() < 0.9
        risk = (0.8 if not cheap else 0.2) + rng.uniform(-0.15, 0.15) if informative \
            else rng.random()
        out.append(ComputeItem(id=str(i), risk=risk, cheap_correct=cheap,
                               expensive_correct=expensive))
    return out


def test_escalate_takes_the_riskiest_and_unscored_first() -> None:
    assert escalate([0.1, 0.9, None, 0.5], 0.5) == [1, 2]
    assert escalate([0.1, 0.9, None, 0.5], 0.0) == []
    assert escalate([0.3, 0.3, 0.3], 0.34) == [0]  # ties keep input order; floor(1.02) = 1
    assert n_escalated(10, 0.29) == 2 and n_escalated(10, 0.3) == 3
    with pytest.raises(ValueError):
        escalate([0.1], 1.5)


def test_curve_ends_and_baselines_are_exact() -> None:
    items = _items(400, 1, informative=True)
    curve = budget_curve(items)
    first, last = curve.points[0], curve.points[-1]
    assert first.accuracy == first.random == first.oracle == curve.cheap_accuracy
    assert last.accuracy == last.random == last.oracle == curve.expensive_accuracy
    for point in curve.points:
        assert point.random - 1e-12 <= point.oracle + 1e-12
        assert point.accuracy <= point.oracle + 1e-12
    assert curve.gain_over_random > 0.05  # an informative risk beats random allocation


def test_an_uninformative_risk_is_close_to_random() -> None:
    curve = budget_curve(_items(4000, 2, informative=False))
    assert abs(curve.gain_over_random) < 0.02


def test_guided_runner_pays_the_expensive_path_only_where_chosen() -> None:
    calls: list[str] = []

    async def cheap(item: str) -> str:
        return f"cheap:{item}"

    async def risk(item: str, answer: str) -> float | None:
        return None if item == "d" else {"a": 0.9, "b": 0.1, "c": 0.5}[item]

    async def expensive(item: str) -> str:
        calls.append(item)
        return f"expensive:{item}"

    out = asyncio.run(run_guided(["a", "b", "c", "d"], cheap=cheap, risk=risk,
                                 expensive=expensive, budget=0.5))
    assert sorted(calls) == ["a", "d"]
    assert [g.answer for g in out] == ["expensive:a", "cheap:b", "cheap:c", "expensive:d"]
    assert [g.escalated for g in out] == [True, False, False, True]


def test_cli_writes_the_curve_and_chart(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text("".join(i.model_dump_json() + "\n" for i in _items(50, 3, True)))
    out, svg = tmp_path / "curve.json", tmp_path / "curve.svg"
    result = CliRunner().invoke(main, ["risk", "compute", str(items), "--budgets",
                                       "0,0.4,1", "--json", str(out), "--svg", str(svg)])
    assert result.exit_code == 0, result.output
    assert [p["budget"] for p in json.loads(out.read_text())["points"]] == [0.0, 0.4, 1.0]
    assert svg.read_text().startswith("<svg") and "oracle" in svg.read_text()
    items.write_text('{"id": "x", "risk": 2}\n')
    bad = CliRunner().invoke(main, ["risk", "compute", str(items)])
    assert bad.exit_code == 2 and "not a compute item" in bad.output


def test_chart_escapes_its_title() -> None:
    svg = curve_svg(budget_curve(_items(20, 4, True)), title="<script>x</script>")
    assert "<script>" not in svg
