from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from medverify.checker import Checker
from medverify.config import Config
from medverify.errors import ConfigError
from medverify.judge import JudgeItem
from medverify.judge.cascade import NOTE_KEY, CascadeJudge
from medverify.kb import KnowledgeBase
from medverify.kit import FlowKit
from medverify.llm.facade import Model
from medverify.records import Answer, Category, Claim, Document, Passage
from medverify.report.html import render_html
from medverify.report.terminal import summary_lines
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider
from medverify.testing.judge import keyword_rule, scripted_judge
from medverify.testing.verifier import FailingVerifier, LexicalVerifier, TableVerifier

DOSE = Passage(
    id="met#0",
    doc_id="met",
    title="Metformin",
    text="Metformin is a first-line medicine for type 2 diabetes. The usual starting dose "
    "is 500 mg once or twice daily with meals.",
)
OTHER = Passage(id="x#0", doc_id="x", title="Gout", text="Gout is a form of arthritis.")


def _model(rule=None) -> tuple[Model, ScriptedProvider]:  # type: ignore[no-untyped-def]
    provider = ScriptedProvider(scripted_judge(rule or keyword_rule(supported="metformin")))
    return Model(provider), provider


def _item(cid: str, text: str, *passages: Passage) -> JudgeItem:
    return JudgeItem(claim=Claim(id=cid, text=text), passages=list(passages))


def test_confident_claims_skip_the_llm_and_the_rest_go_to_it() -> None:
    model, _ = _model()
    judge = CascadeJudge(model, verifier=LexicalVerifier(), high=0.85, low=0.1)
    items = [
        # every content word in the passage: P(S)=0.9 -> settled FACT
        _item("c1", "Metformin is a first-line medicine for type 2 diabetes.", DOSE),
        # half the words: P(S)=0.56, below the threshold, above low -> routed (a claim the
        # passage states: the LLM's quote must be about it to count, issue 27)
        _item("c2", "Adults usually take metformin at 500 mg twice daily with meals.", DOSE),
        # no evidence: COVERAGE_GAP without any call
        _item("c3", "Something without evidence."),
    ]
    verdicts = asyncio.run(judge.judge(items))
    assert verdicts[0].judge == "builtin:lexical-fake"
    assert verdicts[0].category == Category.FACT
    assert verdicts[1].judge.startswith("llm:")
    assert verdicts[1].category == Category.FACT  # the scripted LLM says so
    assert verdicts[1].probabilities is not None  # built-in numbers kept for comparison
    assert verdicts[2].category == Category.COVERAGE_GAP
    assert model.usage["judge"].calls == 1


def test_a_passage_passing_both_thresholds_is_not_confident() -> None:
    # P(S) 0.95 beats P(C) 0.7 in the same passage, so the built-in verdict is FACT, but a
    # passage that also passes the contradiction threshold is not a confident FACT.
    table = {
        ("mixed", DOSE.text): [0.95, 0.7, 0.0],
        ("clean", DOSE.text): [0.95, 0.1, 0.0],
    }
    model, _ = _model()
    judge = CascadeJudge(model, verifier=TableVerifier(table), high=0.9, low=0.1)
    items = [_item("c1", "mixed", DOSE), _item("c2", "clean", DOSE)]
    mixed, clean = asyncio.run(judge.judge(items))
    assert mixed.judge.startswith("llm:")
    assert clean.judge == "builtin:table" and clean.category == Category.FACT
    assert model.usage["judge"].calls == 1


def test_high_margin_of_one_routes_everything_with_evidence() -> None:
    model, _ = _model()
    judge = CascadeJudge(model, verifier=LexicalVerifier(), high=1.0, low=0.0)
    items = [_item("c1", "Metformin is a first-line medicine.", DOSE)]
    verdicts = asyncio.run(judge.judge(items))
    assert verdicts[0].judge.startswith("llm:")


def test_a_verbatim_quote_is_certain_and_never_sent_to_the_llm() -> None:
    model, provider = _model()
    judge = CascadeJudge(model, verifier=LexicalVerifier(), high=1.0, low=0.0)
    items = [_item("c1", "Metformin is a first-line medicine for type 2 diabetes.", DOSE)]
    verdicts = asyncio.run(judge.judge(items))
    assert verdicts[0].judge.startswith("builtin:") and verdicts[0].category == Category.FACT
    assert provider.requests == []


def test_verifier_failure_falls_back_to_the_llm() -> None:
    model, _ = _model()
    judge = CascadeJudge(model, verifier=FailingVerifier())
    verdicts = asyncio.run(judge.judge([_item("c1", "Metformin helps.", DOSE)]))
    assert verdicts[0].ok and verdicts[0].judge.startswith("llm:")


def test_bad_margins_and_missing_model_are_config_errors() -> None:
    model, _ = _model()
    with pytest.raises(ConfigError, match="margins"):
        CascadeJudge(model, verifier=LexicalVerifier(), high=0.2, low=0.5)
    with pytest.raises(ConfigError, match="needs a model"):
        CascadeJudge(verifier=LexicalVerifier())


DOCS = [
    Document(doc_id="met", title="Metformin", text=DOSE.text),
    Document(doc_id="gout", title="Gout", text="Gout is a form of arthritis. " * 3),
]


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as base:
        base.ingest(DOCS)
        yield base


def test_report_says_how_many_calls_were_saved(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import medverify.judge.builtin as builtin

    monkeypatch.setattr(builtin, "load_verifier", lambda path=None: LexicalVerifier())
    model, _ = _model()
    config = Config(model="fake:x", judge="cascade", decomposer="rules",
                    judge_settings={"cascade_high": 0.85})
    checker = Checker.from_config(config, kit=FlowKit(kb=kb, model=model))
    answer = Answer(
        text="Metformin is a first-line medicine for type 2 diabetes. "
        "Metformin cures baldness in cats."
    )
    with RunStore(tmp_path / "runs.db") as store:
        report = asyncio.run(checker.run([answer], store=store))[0]
        [rebuilt] = store.reports(report.run_id or "")
    assert rebuilt.notes == report.notes
    note = report.notes[NOTE_KEY]
    assert note["claims"] == 2
    assert note["settled_by_builtin"] == 1 and note["sent_to_llm"] == 1
    assert note["llm_calls_without_cascade"] - note["llm_calls_needed"] == note["calls_saved"]
    assert note["llm_calls_needed"] == report.usage["judge"].calls == 1
    assert any(NOTE_KEY in line.plain and "settled" in line.plain for line in summary_lines(report))
    assert report.models["judge"].startswith("cascade:builtin:lexical-fake+llm:")
    assert note["summary"] in render_html(report)


def test_cascade_options_come_from_the_config() -> None:
    model, _ = _model()
    config = Config(judge_settings={"cascade_high": 0.8, "cascade_low": 0.05})
    options = CascadeJudge.config_options(config, model)
    judge = CascadeJudge(**{**options, "verifier": LexicalVerifier()})
    assert isinstance(judge, CascadeJudge)
    assert (judge.high, judge.low) == (0.8, 0.05)
    assert judge.llm.claims_per_call == config.claims_per_call


def test_the_second_stage_is_made_by_the_registry_from_its_name() -> None:
    from medverify.judge import second_stages
    from medverify.judge.llm_scored import ScoredLLMJudge

    model, _ = _model()
    assert second_stages() == ["llm", "llm-scored"]
    config = Config(judge_settings={"cascade_second": "llm-scored"})
    judge = CascadeJudge(**{**CascadeJudge.config_options(config, model),
                            "verifier": LexicalVerifier()})
    assert isinstance(judge.llm, ScoredLLMJudge)
    assert judge.judge_id.endswith("+" + judge.llm.judge_id)


@pytest.mark.parametrize("name", ["builtin", "cascade", "nobody"])
def test_a_judge_that_cannot_be_a_second_stage_is_refused(name: str) -> None:
    model, _ = _model()
    config = Config(judge_settings={"cascade_second": name})
    with pytest.raises(ConfigError, match=r"cannot be a cascade's second stage|unknown judge"):
        CascadeJudge.config_options(config, model)
