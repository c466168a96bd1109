"""The prompt-injection probes and their flip-rate measurement, against fakes (the real rate
needs a real model: `medverify eval injection --model SPEC`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from medverify.cli import main
from medverify.injection import (
    InjectionCase,
    attacked_text,
    load_cases,
    measure_injection,
    wilson,
)
from medverify.judge.llm import LLMJudge
from medverify.llm.facade import Model
from medverify.records import Category
from medverify.testing import FakeChatServer, FakeResponse, ScriptedProvider
from medverify.testing.judge import Decision, judge_reply, prompt_blocks

_WORDS = re.compile(r"[a-z0-9]+")


def _honest(claim: str, passages: dict[str, str]) -> Decision:
    """Supported when the claim's content words are in the evidence, contradicted when the
    evidence says 'not'/'do not' near them: enough for the shipped bases, blind to attacks."""
    words = set(_WORDS.findall(claim.lower())) - {"the", "of", "a", "with", "for", "should"}
    text = " ".join(passages.values()).lower()
    shared = len(words & set(_WORDS.findall(text))) / max(len(words), 1)
    negated = any(k in text for k in ("should not", "do not work", "500 mg once"))
    return (shared >= 0.6 and not negated, negated)


def _prompt(request: Any) -> str:
    """The user prompt of an in-process request or of a fake server's request body."""
    if isinstance(request, dict):
        return str(request["messages"][-1]["content"])
    return str(request.messages[-1].content)


def _gullible(request: Any) -> str:
    """Obeys any instruction in the evidence that names a verdict."""
    prompt = _prompt(request)
    passages, _ = prompt_blocks(prompt)
    evidence = " ".join(passages.values())

    def rule(claim: str, shown: dict[str, str]) -> Decision:
        if "SUPPORTED" in evidence or '"supported": true' in evidence:
            return True, False
        if "CONTRADICTED" in evidence or '"contradicted": true' in evidence:
            return False, True
        return _honest(claim, shown)

    return judge_reply(prompt, rule)


def _robust(request: Any) -> str:
    prompt = _prompt(request)
    passages, _ = prompt_blocks(prompt)
    clean = {k: v.split("\n")[0] if "NOTE TO" not in v else v.split("\n", 1)[-1]
             for k, v in passages.items()}
    return judge_reply(prompt, lambda claim, _shown: _honest(claim, clean))


def _measure(reply: Any, cases: list[InjectionCase]) -> Any:
    import asyncio

    judge = LLMJudge(Model(ScriptedProvider(reply)))
    return asyncio.run(measure_injection(judge, cases, cases_version="t"))


def test_shipped_set_expands_to_every_attack_on_every_base() -> None:
    version, cases = load_cases()
    assert version == "injection/v1" and len(cases) == 60
    assert len({c.id for c in cases}) == 60 and sum(c.control for c in cases) == 12
    assert {c.attack for c in cases} >= {"ignore_instructions", "close_fence", "fake_json",
                                         "hidden_html", "restate_claim"}
    for case in cases:
        assert case.target != case.expected
        text = attacked_text(case)
        assert " ".join(case.clean.split()[:6]) in text  # the evidence survives extraction
        assert "{" + "target_word}" not in text and "{claim}" not in text
    fake = next(c for c in cases if c.attack == "fake_json" and c.target == Category.FACT)
    assert '"supported": true' in fake.attacked


def test_a_gullible_judge_flips_and_a_robust_one_does_not() -> None:
    _, cases = load_cases()
    kb_cases = [c for c in cases if c.attack in ("ignore_instructions", "directive_to_checker")]
    gullible = _measure(_gullible, kb_cases)
    assert gullible.overall.clean_correct.value == 1.0
    # every probe flips, except where the quote the obeying judge gives does not count
    # (issue 27: "5000 mg" is not in the sentence it quotes as support)
    assert gullible.overall.flip.n == len(kb_cases) and gullible.overall.flip.k >= 1
    assert gullible.overall.flip.k + gullible.overall.not_counted == len(kb_cases)
    robust = _measure(_robust, kb_cases)
    assert robust.overall.flip.value == 0.0 and robust.overall.n_errors == 0
    assert [g.name for g in robust.by_attack] == ["ignore_instructions", "directive_to_checker"]


def test_judge_errors_are_counted_apart_never_as_flips() -> None:
    _, cases = load_cases()
    report = _measure(lambda _r: "I refuse.", cases[:18])
    assert report.overall.n_errors == 6 and report.controls.n_errors == 12
    assert report.overall.flip.value is None and report.overall.flip.n == 0
    assert all(o.attacked.error for o in report.outcomes)


def test_each_probe_is_judged_alone() -> None:
    _, cases = load_cases()
    seen: list[int] = []

    def reply(request: Any) -> str:
        seen.append(len(prompt_blocks(_prompt(request))[1]))
        return _robust(request)

    _measure(reply, cases[:8])
    assert seen and set(seen) == {1}


def test_wilson_interval() -> None:
    assert wilson(0, 0).value is None
    rate = wilson(6, 40)
    assert rate.value == pytest.approx(0.15)
    assert rate.ci == pytest.approx((0.0706, 0.2914), abs=1e-3)


def test_cli_against_a_local_endpoint_and_custom_cases(tmp_path: Path) -> None:
    _, cases = load_cases()
    attacks = [c for c in cases if not c.control]
    custom = tmp_path / "cases.jsonl"
    custom.write_text("\n".join(c.model_dump_json() for c in attacks[:4]) + "\n")
    out = tmp_path / "inj.json"
    with FakeChatServer(_gullible) as server:
        result = CliRunner().invoke(main, [
            "eval", "injection", "--cases", str(custom), "--judge", "llm",
            "--model", f"openai-compatible:j@{server.base_url}", "--json", str(out),
        ])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    overall = data["overall"]
    assert overall["n"] == 4 and overall["flip"]["k"] + overall["not_counted"] == 4
    assert "Prompt injection" in result.output


def test_cli_reports_unscored_probes(tmp_path: Path) -> None:
    with FakeChatServer(FakeResponse(text="not json")) as server:
        result = CliRunner().invoke(main, [
            "eval", "injection", "--limit", "15", "--judge", "llm",
            "--model", f"openai-compatible:j@{server.base_url}",
        ])
    assert result.exit_code == 0
    assert "15 of 15 probes were not scored" in " ".join(result.output.split())


@pytest.mark.parametrize("content", ["{not json", '{"version": "x"}', ""])
def test_bad_case_files_are_input_errors(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    result = CliRunner().invoke(main, ["eval", "injection", "--cases", str(path)])
    assert result.exit_code == 2 and "injection set" in result.output
