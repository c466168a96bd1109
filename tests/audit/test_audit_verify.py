"""Pairing (all vs cited), judging pairs on selected passages, the claim outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from medverify.audit.records import SupportLabel
from medverify.audit.select import PassageSelector
from medverify.audit.verify import PairVerifier, pair_sources, resolve_markers
from medverify.judge import JudgeItem
from medverify.kb.embed_base import HashEmbedder
from medverify.records import Claim, Source, Verdict
from medverify.testing.judge import WordJudge


def _judge() -> WordJudge:
    return WordJudge(_broken_on_b)


def _broken_on_b(item: JudgeItem) -> str | None:
    """'broken' claims get an error verdict when judged against source 'b'."""
    if "broken" in item.claim.text and item.claim.id.endswith("@b"):
        return "judge timed out"
    return None


class RaisingJudge:
    name = "raising"
    prompt_version = None

    async def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        raise RuntimeError("boom")


SOURCES = [
    Source(id="a", url="https://a.org/", text="aspirin thins blood", status="given"),
    Source(id="b", url="https://b.org/x", text="statins lower ldl", status="given"),
    Source(id="c", url="https://c.org/", status="invalid", reason="404"),
]


def _verifier(judge: object, pairing: str = "all") -> PairVerifier:
    selector = PassageSelector(HashEmbedder(), passage_tokens=32, k=2)
    return PairVerifier(judge, selector, pairing=pairing, batch_size=2)  # type: ignore[arg-type]


def test_resolve_markers_by_id_and_by_url() -> None:
    assert resolve_markers(["b", "https://A.org", "zz", "b"], SOURCES) == ["b", "a"]
    assert resolve_markers(["www.b.org/x"], SOURCES) == []  # a different host
    assert resolve_markers(["https://b.org/x#frag"], SOURCES) == ["b"]


def test_pair_sources_all_vs_cited() -> None:
    claim = Claim(id="c1", text="x", markers=["b", "c"])
    assert [s.id for s in pair_sources(claim, SOURCES, "all")] == ["a", "b"]
    assert [s.id for s in pair_sources(claim, SOURCES, "cited")] == ["b"]  # c is invalid


def test_all_pairing_judges_every_claim_against_every_valid_source() -> None:
    judge = _judge()
    claims = [Claim(id="c1", text="aspirin thins blood.", markers=["b"]),
              Claim(id="c2", text="vitamin c cures colds.")]
    audits = asyncio.run(_verifier(judge).verify(claims, SOURCES, [SupportLabel.SUPPORTED, None]))
    assert len(judge.items) == 4
    first, second = audits
    assert [(p.claim_id, p.source_id) for p in first.pairs] == [("c1", "a"), ("c1", "b")]
    assert first.supported is True and first.supporting_source_ids == ["a"]
    assert first.gold is SupportLabel.SUPPORTED and first.cited_source_ids == ["b"]
    assert all(p.verdict.claim_id == "c1" for p in first.pairs)
    assert second.supported is False and second.error is None
    assert all(p.input_tokens > 0 and p.source_tokens >= p.input_tokens for p in first.pairs)


def test_cited_pairing_only_judges_cited_sources() -> None:
    judge = _judge()
    claims = [Claim(id="c1", text="aspirin thins blood.", markers=["b"]),
              Claim(id="c2", text="statins lower ldl.", markers=["https://b.org/x"]),
              Claim(id="c3", text="uncited claim.")]
    audits = asyncio.run(_verifier(judge, "cited").verify(claims, SOURCES))
    assert [[p.source_id for p in a.pairs] for a in audits] == [["b"], ["b"], []]
    assert [a.supported for a in audits] == [False, True, False]
    assert audits[2].cited_source_ids == [] and audits[2].error is None


def test_a_failed_pair_makes_the_claim_unknown_not_unsupported() -> None:
    claims = [Claim(id="c1", text="broken claim."), Claim(id="c2", text="aspirin broken.")]
    audits = asyncio.run(_verifier(_judge()).verify(claims, SOURCES))
    unknown = audits[0]
    assert [p.supported for p in unknown.pairs] == [False, None]
    assert unknown.supported is None
    assert unknown.error is not None and "judge timed out" in unknown.error


def test_a_supported_pair_wins_over_a_failed_one() -> None:
    source = Source(id="a", text="broken aspirin", status="given")
    failing = Source(id="b", text="other", status="given")
    (audit,) = asyncio.run(
        _verifier(_judge()).verify([Claim(id="c1", text="broken aspirin")], [source, failing])
    )
    assert audit.supported is True and audit.error is None


def test_a_raising_judge_leaves_pairs_unscored() -> None:
    (audit,) = asyncio.run(
        _verifier(RaisingJudge()).verify([Claim(id="c1", text="aspirin")], SOURCES)
    )
    assert audit.supported is None
    assert all(p.verdict.error and "boom" in p.verdict.error for p in audit.pairs)


def test_no_valid_source_means_unsupported() -> None:
    (audit,) = asyncio.run(_verifier(_judge()).verify([Claim(id="c1", text="x")], SOURCES[2:]))
    assert audit.pairs == [] and audit.supported is False


@pytest.mark.parametrize("batch", [1, 3, 64])
def test_batching_does_not_change_the_outcome(batch: int) -> None:
    verifier = _verifier(_judge())
    verifier.batch_size = batch
    claims = [Claim(id=f"c{i}", text=t) for i, t in enumerate(["aspirin", "ldl", "none"], 1)]
    audits = asyncio.run(verifier.verify(claims, SOURCES))
    assert [a.supported for a in audits] == [True, True, False]
