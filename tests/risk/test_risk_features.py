"""Risk features against values computed by hand on small known distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from medverify.errors import InputError
from medverify.records import Claim, Span
from medverify.risk.features import (
    FEATURE_SCHEMA_VERSION,
    FILL_VALUE,
    STATS,
    build_schema,
    claim_units,
    describe,
    extract_features,
    feature_names,
    vectorize,
)
from medverify.risk.records import TokenStep, TokenTrace, TopToken
from medverify.risk.series import (
    align_positions,
    entropy_with_tail,
    pairwise_kl,
    position_features,
)

ln = math.log


def step(token: str, start: int, prob: float, rank: int, top: dict[str, float]) -> TokenStep:
    return TokenStep(
        token=token, start=start, end=start + len(token), logprob=ln(prob), rank=rank,
        top=[TopToken(token=t, logprob=ln(p)) for t, p in top.items()],
    )


def trace(
    answer: str, steps: list[TokenStep], scorer: str = "m", variant: str = "original"
) -> TokenTrace:
    return TokenTrace(scorer=scorer, answer=answer, steps=steps, prompt_variant=variant, k=3)


def tokens_trace(answer: str, pieces: list[str], probs: list[float], scorer: str = "m",
                 variant: str = "original") -> TokenTrace:
    """Each piece is the answer token, listed first in a top-2 with ``other``."""
    steps, pos = [], 0
    for piece, p in zip(pieces, probs, strict=True):
        assert answer[pos : pos + len(piece)] == piece
        steps.append(step(piece, pos, p, 1, {piece: p, "other": (1 - p) / 2}))
        pos += len(piece)
    assert pos == len(answer)
    return trace(answer, steps, scorer, variant)


# --------------------------------------------------------------------------- entropy


def test_entropy_with_tail_uniform_over_vocab_by_hand() -> None:
    top = np.log([[0.5, 0.3, 0.1]])
    expected = -(0.5 * ln(0.5) + 0.3 * ln(0.3) + 0.1 * ln(0.1)) - 0.1 * ln(0.1 / 7)
    assert entropy_with_tail(top, 10) == pytest.approx([expected], abs=1e-12)


def test_entropy_lower_bound_treats_tail_as_one_outcome() -> None:
    top = np.log([0.5, 0.3, 0.1])  # 1-D input gives a scalar-shaped result
    expected = -(0.5 * ln(0.5) + 0.3 * ln(0.3) + 0.1 * ln(0.1)) - 0.1 * ln(0.1)
    assert float(entropy_with_tail(top, None)) == pytest.approx(expected, abs=1e-12)
    assert float(entropy_with_tail(top, 10)) > float(entropy_with_tail(top, None))


def test_entropy_padding_and_complete_distribution() -> None:
    rows = np.array([[ln(0.5), ln(0.5), -np.inf], [ln(0.6), -np.inf, -np.inf]])
    got = entropy_with_tail(rows, 4)
    assert got[0] == pytest.approx(ln(2), abs=1e-12)  # no tail: plain entropy
    assert got[1] == pytest.approx(-0.6 * ln(0.6) - 0.4 * ln(0.4 / 3), abs=1e-12)


def test_entropy_rejects_vocab_smaller_than_list() -> None:
    with pytest.raises(InputError, match="vocab_size"):
        entropy_with_tail(np.log([[0.5, 0.3, 0.1]]), 2)


# --------------------------------------------------------------------------- per model


def test_position_features_pass_through_and_top_masses() -> None:
    top = {"a": 0.4, "b": 0.2, "c": 0.1, "d": 0.05, "e": 0.05, "f": 0.04}
    answer = "bx"
    steps = [
        step("b", 0, 0.2, 2, top),
        TokenStep(token="x", start=1, end=2, logprob=ln(0.05), rank=5, top=[]),
    ]
    series = position_features(trace(answer, steps), vocab_size=20)
    cols = series.columns
    assert cols["logprob"] == pytest.approx([ln(0.2), ln(0.05)])
    assert cols["prob"] == pytest.approx([0.2, 0.05])
    assert cols["rank"].tolist() == [2.0, 5.0]
    assert cols["log_rank"] == pytest.approx([ln(2), ln(5)])
    assert cols["top1"][0] == pytest.approx(0.4)
    assert cols["top5"][0] == pytest.approx(0.8)
    assert cols["topk_mass"][0] == pytest.approx(0.84)
    assert np.isnan(cols["top1"][1]) and np.isnan(cols["topk_mass"][1])  # no list there
    h0 = -sum(p * ln(p) for p in top.values()) - 0.16 * ln(0.16 / 14)
    assert cols["entropy"][0] == pytest.approx(h0, abs=1e-12)
    # only the answer token is known at position 1: it joins the known outcomes
    assert cols["entropy"][1] == pytest.approx(-0.05 * ln(0.05) - 0.95 * ln(0.95 / 19))
    assert cols["entropy_lb"][1] == pytest.approx(-0.05 * ln(0.05) - 0.95 * ln(0.95))
    assert series.starts.tolist() == [0, 1] and series.ends.tolist() == [1, 2]


def test_answer_token_outside_top_k_counts_in_entropy() -> None:
    s = step("z", 0, 0.05, 7, {"a": 0.5, "b": 0.3})
    got = position_features(trace("z", [s]), vocab_size=10).columns["entropy"][0]
    known = [0.5, 0.3, 0.05]
    assert got == pytest.approx(-sum(p * ln(p) for p in known) - 0.15 * ln(0.15 / 7))


def test_answer_logprob_minus_infinity_is_floored() -> None:
    s = TokenStep(token="a", start=0, end=1, logprob=-math.inf, rank=9, top=[])
    cols = position_features(trace("a", [s])).columns
    assert cols["logprob"][0] == -100.0 and np.isfinite(cols["entropy"][0])


# --------------------------------------------------------------------------- KL


def _kl(p: list[float], q: list[float]) -> float:
    return sum(a * ln(a / b) for a, b in zip(p, q, strict=True))


def _one_step_pair() -> tuple[TokenTrace, TokenTrace]:
    a = trace("a", [step("a", 0, 0.5, 1, {"a": 0.5, "b": 0.3, "c": 0.1})], "A")
    b = trace("a", [step("a", 0, 0.4, 1, {"a": 0.4, "b": 0.4, "d": 0.1})], "B")
    return a, b


def test_kl_with_known_vocab_by_hand() -> None:
    a, b = _one_step_pair()
    got = pairwise_kl(a, b, vocab_a=10, vocab_b=10)
    q = 0.1 / 7  # each model's tail 0.1 spread over 10 - 3 tokens
    p_a = [0.1 - q, 0.5, 0.3, 0.1, q]  # OTHER, a, b, c, d
    p_b = [0.1 - q, 0.4, 0.4, q, 0.1]
    assert got.kl_ab[0] == pytest.approx(_kl(p_a, p_b), abs=1e-9)
    assert got.kl_ba[0] == pytest.approx(_kl(p_b, p_a), abs=1e-9)
    assert got.kl[0] == pytest.approx((_kl(p_a, p_b) + _kl(p_b, p_a)) / 2, abs=1e-9)
    assert got.coverage == 1.0


def test_kl_without_vocab_shares_tail_with_missing_tokens() -> None:
    a, b = _one_step_pair()
    got = pairwise_kl(a, b)
    p_a = [0.05, 0.5, 0.3, 0.1, 0.05]  # tail 0.1 over {d, OTHER}
    p_b = [0.05, 0.4, 0.4, 0.05, 0.1]  # tail 0.1 over {c, OTHER}
    assert got.kl_ab[0] == pytest.approx(_kl(p_a, p_b), abs=1e-9)
    assert got.kl_ba[0] == pytest.approx(_kl(p_b, p_a), abs=1e-9)


def test_kl_missing_token_capped_by_smallest_listed_prob() -> None:
    a = trace("a", [step("a", 0, 0.5, 1, {"a": 0.5, "b": 0.01})], "A")
    b = trace("a", [step("a", 0, 0.5, 1, {"a": 0.5, "c": 0.3})], "B")
    got = pairwise_kl(a, b)
    p_a = [0.49 - 0.01, 0.5, 0.01, 0.01]  # OTHER, a, b, c: c capped at 0.01 (< 0.49 / 2)
    p_b = [0.2 / 2, 0.5, 0.1, 0.3]  # b gets 0.2 / 2 (<= 0.3)
    assert got.kl_ab[0] == pytest.approx(_kl(p_a, p_b), abs=1e-9)


def test_kl_identical_is_zero_and_disjoint_full_lists_stay_finite() -> None:
    a, _ = _one_step_pair()
    assert pairwise_kl(a, a).kl[0] == pytest.approx(0.0, abs=1e-12)
    x = trace("a", [step("a", 0, 1.0, 1, {"a": 1.0})])
    y = trace("a", [step("a", 0, 1e-3, 2, {"b": 1.0 - 1e-3})])  # "a" known from its logprob
    assert pairwise_kl(x, y).kl_ab[0] == pytest.approx(ln(1000), abs=1e-6)
    z = trace("a", [step("a", 0, 1.0, 1, {"b": 1.0})])  # no mass anywhere near "a"
    got = pairwise_kl(x, z)
    assert np.isfinite(got.kl_ab[0]) and got.kl_ab[0] == pytest.approx(-ln(1e-12), rel=1e-3)


def test_alignment_across_tokenizers_by_character_offsets() -> None:
    answer = "metformin lowers glucose."
    one = tokens_trace(answer, ["metformin", " lowers", " glucose", "."], [0.9, 0.8, 0.7, 0.6])
    split = tokens_trace(
        answer, ["met", "formin", " low", "ers", " glucose", "."], [0.5, 0.9, 0.6, 0.9, 0.7, 0.6]
    )
    ia, ib, coverage = align_positions(one, split)
    assert ia.tolist() == [0, 1, 2, 3] and ib.tolist() == [0, 2, 4, 5]
    assert coverage == pytest.approx(2 * 4 / (4 + 6))
    got = pairwise_kl(one, split)
    assert got.starts.tolist() == [0, 9, 16, 24]
    assert got.ends.tolist() == [9, 16, 24, 25]
    assert got.kl[2] == pytest.approx(0.0, abs=1e-12)  # " glucose" identical on both sides
    assert got.kl[0] > 0  # "metformin" vs "met" are different outcomes


def test_alignment_refuses_different_answers() -> None:
    with pytest.raises(InputError, match="different answers"):
        align_positions(tokens_trace("ab", ["ab"], [0.5]), tokens_trace("ac", ["ac"], [0.5]))


# --------------------------------------------------------------------------- statistics


def test_describe_against_scipy_and_hand_formulas() -> None:
    x = np.array([1.0, 2.0, 3.0, 4.0, 10.0])
    got = describe(x)
    assert got["mean"] == 4.0 and got["var"] == pytest.approx(10.0)
    assert got["skew"] == pytest.approx(scipy.stats.skew(x, bias=True))
    assert got["kurt"] == pytest.approx(scipy.stats.kurtosis(x, fisher=True, bias=True))
    dev = x - 4.0
    assert got["m5"] == pytest.approx(np.mean(dev**5) / 10.0**2.5)
    assert got["skew"] == pytest.approx(np.mean(dev**3) / 10.0**1.5)
    assert (got["min"], got["max"]) == (1.0, 10.0)
    quantiles = [got[q] for q in ("q10", "q25", "q50", "q75", "q90")]
    assert quantiles == pytest.approx([1.4, 2.0, 3.0, 4.0, 7.6])


def test_describe_undefined_statistics() -> None:
    assert all(v is None for v in describe(np.array([])).values())
    one = describe(np.array([5.0]))
    assert one["mean"] == 5.0 and one["var"] == 0.0 and one["skew"] is None
    three = describe(np.array([1.0, 2.0, 3.0]))
    assert three["skew"] == pytest.approx(0.0) and three["kurt"] is None and three["m5"] is None
    flat = describe(np.full(6, 2.0))
    assert flat["skew"] is None and flat["kurt"] is None and flat["m5"] is None
    assert describe(np.array([1.0, np.nan, 3.0]))["mean"] == 2.0  # NaN positions left out


# --------------------------------------------------------------------------- aggregation

ANSWER = "Metformin lowers glucose. It causes acidosis."
PIECES = ["Met", "formin", " lowers", " glucose", ".", " It", " causes", " acidosis", "."]
PROBS = [0.5, 0.9, 0.8, 0.7, 0.95, 0.6, 0.3, 0.1, 0.9]


def test_sentence_aggregation_picks_positions_per_sentence() -> None:
    rows = extract_features({"m": [tokens_trace(ANSWER, PIECES, PROBS)]}, granularity="sentence")
    assert [r.text for r in rows] == ["Metformin lowers glucose.", "It causes acidosis."]
    first, second = rows
    assert first.values["m0.n_tokens"] == 5 and second.values["m0.n_tokens"] == 4
    assert first.values["m0.logprob.mean"] == pytest.approx(np.mean(np.log(PROBS[:5])))
    assert second.values["m0.logprob.min"] == pytest.approx(ln(0.1))
    assert second.values["m0.prob.q50"] == pytest.approx(np.median(PROBS[5:]))
    assert second.values["unit.rel_start"] == pytest.approx(26 / len(ANSWER))


def test_claim_aggregation_uses_claim_spans() -> None:
    claims = [
        Claim(id="c1", text="It causes acidosis.", span=Span(start=26, end=45)),
        Claim(id="c2", text="glucose", span=Span(start=17, end=24)),
        Claim(id="nospan", text="unplaced"),
    ]
    units = claim_units(claims)
    assert [u[0] for u in units] == ["c1", "c2"]
    rows = extract_features(
        {"m": [tokens_trace(ANSWER, PIECES, PROBS)]}, granularity="claim", units=units
    )
    assert rows[0].values["m0.n_tokens"] == 4
    assert rows[1].values["m0.n_tokens"] == 1  # " glucose" [16, 24) overlaps [17, 24)
    assert rows[1].values["m0.prob.mean"] == pytest.approx(0.7)
    assert "m0.logprob.skew" in rows[1].missing and rows[1].values["m0.logprob.skew"] == 0.0


def test_claim_granularity_needs_units() -> None:
    with pytest.raises(InputError, match="claim spans"):
        extract_features({"m": [tokens_trace(ANSWER, PIECES, PROBS)]}, granularity="claim")


def test_cross_model_and_rephrasing_features() -> None:
    split = ["Met", "formin", " lowers", " glucose", ".", " It", " causes", " acid", "osis", "."]
    traces = {
        "hf:a": [
            tokens_trace(ANSWER, PIECES, PROBS, "hf:a"),
            tokens_trace(ANSWER, PIECES, [p * 0.9 for p in PROBS], "hf:a", "rephrase-1"),
            tokens_trace(ANSWER, PIECES, [p * 0.5 for p in PROBS], "hf:a", "rephrase-2"),
        ],
        "hf:b": [tokens_trace(ANSWER, split, [0.5] * len(split), "hf:b")],
    }
    (row,) = extract_features(traces, granularity="answer", vocab_sizes={"hf:a": 50})
    expected_std = np.std(np.log([[p, p * 0.9, p * 0.5] for p in PROBS]), axis=1)
    assert row.values["reph.m0.logprob_std.mean"] == pytest.approx(expected_std.mean())
    assert row.values["reph.m0.n_variants"] == 2.0
    assert "reph.m1.logprob_std.mean" in row.missing  # m1 has no rephrasings
    aligned = pairwise_kl(traces["hf:a"][0], traces["hf:b"][0], vocab_a=50)
    assert row.values["kl.m0_m1.mean"] == pytest.approx(aligned.kl.mean())
    assert row.values["kl_ab.m0_m1.max"] == pytest.approx(aligned.kl_ab.max())
    assert row.values["kl.m0_m1.coverage"] == pytest.approx(2 * 9 / (9 + 10))
    reph_kl = [pairwise_kl(traces["hf:a"][0], r, vocab_a=50, vocab_b=50).kl
               for r in traces["hf:a"][1:]]
    assert row.values["reph.m0.kl.mean"] == pytest.approx(np.mean(reph_kl))
    assert row.values["m0.entropy.mean"] != row.values["m0.entropy_lb.mean"]
    assert row.values["m1.entropy.mean"] == row.values["m1.entropy_lb.mean"]  # V unknown


def test_failed_trace_gives_missing_features_filled() -> None:
    broken = TokenTrace(scorer="b", answer=ANSWER, error="timeout")
    rows = extract_features(
        {"a": [tokens_trace(ANSWER, PIECES, PROBS)], "b": [broken]}, granularity="answer"
    )
    row = rows[0]
    assert "m1.logprob.mean" in row.missing and "kl.m0_m1.mean" in row.missing
    assert row.values["m1.logprob.mean"] == FILL_VALUE
    assert "m0.logprob.mean" not in row.missing


def test_traces_of_different_answers_are_refused() -> None:
    with pytest.raises(InputError, match="one answer"):
        extract_features(
            {"a": [tokens_trace("ab", ["ab"], [0.5])], "b": [tokens_trace("ac", ["ac"], [0.5])]},
            granularity="answer",
        )


# --------------------------------------------------------------------------- schema


def test_feature_names_stable_order_and_shape() -> None:
    names = feature_names(["x", "y"], rephrasings=True, granularity="sentence")
    assert names == feature_names(["p", "q"], rephrasings=True, granularity="sentence")
    assert names[: len(STATS)] == [f"m0.logprob.{s}" for s in STATS]
    assert len(names) == len(set(names))
    for name in ("m0.entropy.q90", "kl.m0_m1.mean", "reph.m0.logprob_std.mean", "m1.n_tokens",
                 "dlogprob.m0_m1.mean", "dentropy.m0_m1.q90"):
        assert name in names
    # 2 models x 9 series + 1 pair x 5 + 2 x 2 rephrasing series, 12 stats; + scalars
    assert len(names) == (18 + 5 + 4) * 12 + (2 + 1 + 2 + 2)
    plain = feature_names(["x"], rephrasings=False, granularity="answer")
    assert not any(n.startswith(("reph.", "kl")) for n in plain) and "unit.rel_start" not in plain


def test_rows_follow_schema_and_vectorize_round_trips() -> None:
    schema = build_schema(["hf:a"], rephrasings=False, granularity="sentence")
    assert schema.version == FEATURE_SCHEMA_VERSION and schema.scorers == ["hf:a"]
    rows = extract_features({"hf:a": [tokens_trace(ANSWER, PIECES, PROBS)]},
                            granularity="sentence")
    assert all(list(r.values) == schema.names for r in rows)
    matrix = vectorize(rows, schema)
    assert matrix.shape == (2, len(schema.names))
    for r, row in enumerate(rows):
        assert dict(zip(schema.names, matrix[r].tolist(), strict=True)) == row.values


def test_vectorize_fills_missing_and_refuses_other_schemas() -> None:
    schema = build_schema(["a"], rephrasings=False, granularity="answer")
    rows = extract_features({"a": [tokens_trace(ANSWER, PIECES, PROBS)]}, granularity="answer")
    tampered = rows[0].model_copy(
        update={"values": {**rows[0].values, "m0.logprob.mean": 7.0},
                "missing": ["m0.logprob.mean"]}
    )
    assert vectorize([tampered], schema)[0, schema.names.index("m0.logprob.mean")] == FILL_VALUE
    with pytest.raises(InputError, match="version"):
        vectorize(rows, schema.model_copy(update={"version": "0"}))
    other = build_schema(["a", "b"], rephrasings=False, granularity="answer")
    with pytest.raises(InputError, match="not built with this feature schema"):
        vectorize(rows, other)
    sentence = build_schema(["a"], rephrasings=False, granularity="sentence")
    with pytest.raises(InputError, match="granularity"):
        vectorize(rows, sentence)


def test_trace_without_steps_gives_only_missing_model_stats() -> None:
    empty = TokenTrace(scorer="e", answer=ANSWER)
    (row,) = extract_features({"e": [empty]}, granularity="answer")
    assert row.values["m0.n_tokens"] == 0.0
    assert all(f"m0.logprob.{s}" in row.missing for s in STATS)
    assert vectorize([row], build_schema(["e"], rephrasings=False, granularity="answer")).any()


def test_cross_model_differences_are_taken_at_aligned_positions() -> None:
    from medverify.risk.records import TokenStep, TokenTrace
    from medverify.risk.series import answer_series

    def trace(scorer: str, cuts: list[tuple[int, int, float]]) -> TokenTrace:
        return TokenTrace(scorer=scorer, answer="aa bb", steps=[
            TokenStep(token="aa bb"[a:b], start=a, end=b, logprob=lp, rank=1, top=[])
            for a, b, lp in cuts])

    a = trace("a", [(0, 2, -1.0), (2, 5, -3.0)])
    b = trace("b", [(0, 1, -0.5), (1, 2, -0.5), (2, 5, -1.0)])  # "a" "a" " bb"
    pair = answer_series({"a": [a], "b": [b]}, {}, rephrasings=False).series["pair.m0_m1"]
    assert pair.starts.tolist() == [0, 2]  # both start a token at 0 and at 2
    assert pair.columns["dlogprob"].tolist() == [-0.5, -2.0]
    assert pair.columns["dentropy"].shape == (2,)
