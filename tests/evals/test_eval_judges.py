"""``eval judges``: judges side by side on the same seeded pairs, resumable, with intervals
and the cascade's cost-vs-quality curve."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import medverify.judge.builtin as builtin
from medverify.cli import main
from medverify.config import Config
from medverify.evals.judges import (
    JudgedPair,
    bootstrap,
    cascade_curve,
    evaluate_judges,
    macro_f1,
    parse_judge,
    sample_pairs,
)
from medverify.evals.pairs import Pair
from medverify.llm.base import ChatRequest
from medverify.records import Analysis, Verdict
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.fake_provider import logprob_reply
from medverify.testing.verifier import LexicalVerifier

LABELS = ["SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO"]


@pytest.fixture
def pairs_file(tmp_path: Path) -> Path:
    path = tmp_path / "toy_dev.jsonl"
    rows = [{"id": f"p{i}", "dataset": "toy", "claim": f"Drug {i} lowers blood pressure.",
             "evidence": f"Drug {i} lowers blood pressure in adults." if i % 3 == 0 else
             f"Drug {i} raises blood pressure." if i % 3 == 1 else "Unrelated text.",
             "label": LABELS[i % 3]} for i in range(12)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


@pytest.fixture
def fake_verifier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builtin, "load_verifier", lambda path=None: LexicalVerifier())


def _yes_when_support(request: ChatRequest) -> object:
    text = request.messages[-1].content
    supports = "in adults" in text
    asked_factual = "Factual analysis" in text
    yes = 0.9 if supports == asked_factual else 0.1
    return logprob_reply([{"Yes": yes, "No": 1 - yes}])


@pytest.fixture
def fake_llm() -> ScriptedProvider:
    provider = register_fake("judges", ScriptedProvider(_yes_when_support))
    yield provider
    unregister_fake("judges")


def test_parse_and_sample_are_deterministic(pairs_file: Path) -> None:
    entry = parse_judge("llm-scored=local:qwen2.5-0.5b")
    assert (entry.name, entry.model, entry.slug) == (
        "llm-scored", "local:qwen2.5-0.5b", "llm-scored_local_qwen2.5-0.5b")
    first = [p.id for p in sample_pairs(pairs_file, 5, seed=1)]
    assert first == [p.id for p in sample_pairs(pairs_file, 5, seed=1)]
    assert len(first) == 5 and first != [p.id for p in sample_pairs(pairs_file, 5, seed=2)]


def test_macro_f1_counts_errors_as_wrong_and_bootstrap_brackets_it() -> None:
    gold = ["SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO"] * 10
    assert macro_f1(gold, gold) == 1.0
    assert macro_f1(gold, ["ERROR"] * 30) == 0.0
    noisy = [g if i % 4 else "SUPPORTED" for i, g in enumerate(gold)]
    interval = bootstrap(gold, noisy, macro_f1, seed=0, rounds=200)
    assert interval.low is not None and interval.high is not None
    assert interval.low <= interval.value <= interval.high


def _judged(pid: str, label: str, confident: bool, confidence: float) -> JudgedPair:
    support, contradict = label == "SUPPORTED", label == "CONTRADICTED"
    verdict = Verdict(claim_id=pid, factual=Analysis(holds=support),
                      counterfactual=Analysis(holds=contradict), judge="x:y",
                      confident=confident, confidence=confidence)
    return JudgedPair(pair_id=pid, verdict=verdict, seconds=0.0)


def test_cascade_curve_sends_the_least_sure_first() -> None:
    pairs = [Pair(id=str(i), claim="c", evidence="e", label=LABELS[i % 3]) for i in range(10)]
    # the first judge is right only where it is confident (pairs 0-4)
    first = [_judged(p.id, p.label if i < 5 else "SUPPORTED", i < 5, 0.9 if i < 5 else 0.2)
             for i, p in enumerate(pairs)]
    other = [_judged(p.id, p.label, False, 0.5) for p in pairs]
    curve = cascade_curve("toy", "oracle", pairs, first, other)
    at = {p.share_sent: p.macro_f1 for p in curve.points}
    assert at[0.5] == 1.0 and at[1.0] == 1.0 and at[0.0] < 1.0
    assert curve.gain_kept_at_30 is not None and 0 < curve.gain_kept_at_30 < 1


@pytest.mark.usefixtures("fake_verifier")
def test_judges_side_by_side_resume_and_report(pairs_file: Path, tmp_path: Path,
                                               fake_llm: ScriptedProvider) -> None:
    out = tmp_path / "out"
    entries = [parse_judge("builtin"), parse_judge("llm-scored=fake:judges")]
    report = asyncio.run(evaluate_judges(entries, [pairs_file], out, Config(), sample=9,
                                         seed=0))
    scored = {r.judge: r for r in report.results}
    assert scored["llm-scored=fake:judges"].macro_f1.value is not None
    assert scored["llm-scored=fake:judges"].scores.n == 9
    assert report.cascades and report.cascades[0].second == "llm-scored=fake:judges"
    calls = len(fake_llm.requests)
    assert calls == 18  # two passes per pair
    again = asyncio.run(evaluate_judges(entries, [pairs_file], out, Config(), sample=9,
                                        seed=0))
    assert len(fake_llm.requests) == calls  # resumed from the verdicts files: no new call
    assert [r.macro_f1 for r in again.results] == [r.macro_f1 for r in report.results]
    assert json.loads((out / "judges.json").read_text("utf-8"))["sample"] == 9


@pytest.mark.usefixtures("fake_verifier")
def test_cli_writes_table_svg_and_json(pairs_file: Path, tmp_path: Path,
                                       fake_llm: ScriptedProvider) -> None:
    out = tmp_path / "cli"
    result = CliRunner(env={"COLUMNS": "250"}).invoke(main, [
        "eval", "judges", str(pairs_file), "--sample", "6", "--judge", "builtin",
        "--judge", "llm-scored=fake:judges", "--judge", "cascade=fake:judges", "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = (out / "judges.md").read_text("utf-8")
    assert "cascade=fake:judges" in table and "macro-F1" in table
    assert (out / "judges.svg").read_text("utf-8").startswith("<svg")


def test_judge_option_names_a_registered_judge(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from medverify.cli import main

    pairs = tmp_path / "p.jsonl"
    pairs.write_text("{}\n")
    result = CliRunner().invoke(main, ["eval", "judges", str(pairs), "--judge", "nope=x:y",
                                       "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "'nope' is not one of" in result.output and "builtin" in result.output
