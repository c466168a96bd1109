"""The per-position series of the hallucination classifier's features, computed from
:class:`TokenTrace` (numpy over the scorers' per-token records; no model is called here).
:mod:`medverify.risk.features` aggregates them per unit into named features.

Per-position series (one value per answer token of one scorer's original trace)
-----------------------------------------------------------------------------------
``logprob`` (answer token, natural log, floored at :data:`LOGPROB_FLOOR`), ``prob``,
``rank`` (1 = most likely), ``log_rank``, ``top1`` (largest top-k probability), ``top5``
(mass of the 5 largest), ``topk_mass`` (mass of the whole top-k list), ``entropy`` and
``entropy_lb`` (see :func:`entropy_with_tail`). A position whose step has no top-k list
has ``top1``/``top5``/``topk_mass`` undefined (NaN) and those positions are left out of
the statistics.

The *known outcomes* of a step are its top-k tokens plus the answer token itself when
``rank > len(top)`` (the answer token is outside the list but its probability is known).

Entropy with the tail (:func:`entropy_with_tail`)
-------------------------------------------------
With known probabilities p_1..p_n (sum m <= 1) and tail mass r = 1 - m (clipped at 0):

- ``vocab_size`` V known: the tail is spread uniformly over the V - n other tokens,
  ``H = -sum_i p_i log p_i - r log(r / (V - n))``. Uniform is the largest entropy any tail
  of mass r over V - n tokens can have, so this is an upper bound of the true entropy
  given the top-k (each tail token then has r / (V - n) <= p_k, a feasible tail).
- V unknown: the tail is one outcome, ``H = -sum_i p_i log p_i - r log r``. Merging
  outcomes never increases entropy, so this is a lower bound (``entropy_lb`` always).

Feature ``entropy`` uses V when ``vocab_sizes`` names the scorer, else the lower bound.

Alignment across tokenizers (:func:`pairwise_kl`)
-------------------------------------------------
Two traces of the same answer are compared at the character offsets where *both* models
start a token: position i of A and position j of B are aligned when
``A.steps[i].start == B.steps[j].start`` (the first token starting at a character is
used when a tokenizer emits several there, e.g. byte pieces). At such a point both models
predict the next token after exactly the same answer prefix, so their next-token
distributions are comparable. ``coverage`` = 2 |aligned| / (|starts of A| + |starts of B|)
(1.0 for identical tokenizations). An aligned position's span is
``[start, max(end_A, end_B))``.

KL smoothing
------------
At an aligned position the outcomes are U = the union of both models' known token strings
(duplicates within one model summed) plus one ``OTHER`` bucket (every string outside U).
For model P with known mass m and tail r = 1 - m, each string of U that P does not list
gets ``q = min(r / n_tail, p_min)`` where ``n_tail = V_P - n_P`` when P's vocabulary size
is known, else ``n_tail = |U missing from P| + 1``, and ``p_min`` is P's smallest top-k
probability (a token outside the top-k cannot be more likely than it). ``OTHER`` gets
what is left of the tail, ``r - |missing| q`` (>= 0). Every outcome is then floored at
:data:`KL_EPS` and the distribution renormalised, so KL is finite. ``kl_ab`` = KL(A||B),
``kl_ba`` = KL(B||A), ``kl`` = (kl_ab + kl_ba) / 2 (natural log). At the same aligned
positions, ``dlogprob`` = A's answer-token log-prob minus B's and ``dentropy`` = A's
``entropy_lb`` minus B's: where two models disagree about the same text (CHECK's
cross-model agreement; feature schema 2).

Rephrasings
-----------
For each scorer, the traces whose ``prompt_variant`` is not ``"original"`` are aligned to
the original with the same code (same tokenizer, so every position aligns); at positions
present in all variants: ``logprob_std`` = population std (ddof 0) of the answer-token
log-prob over the original and its rephrasings, and ``kl`` = mean over rephrasings of the
symmetric KL between the original and the rephrasing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from medverify.errors import InputError
from medverify.risk.records import TokenStep, TokenTrace

LOGPROB_FLOOR = -100.0  # answer-token log-probs below this (or -inf) are clipped to it
KL_EPS = 1e-12
ORIGINAL = "original"

MODEL_SERIES: tuple[str, ...] = (
    "logprob", "prob", "rank", "log_rank", "top1", "top5", "topk_mass", "entropy", "entropy_lb",
)
PAIR_SERIES: tuple[str, ...] = ("kl", "kl_ab", "kl_ba", "dlogprob", "dentropy")
REPHRASE_SERIES: tuple[str, ...] = ("logprob_std", "kl")


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class PositionSeries:
    """Per-position values with the character span each position covers."""

    starts: np.ndarray  # int, shape (n,)
    ends: np.ndarray  # int, shape (n,)
    columns: dict[str, np.ndarray]  # name -> float values, shape (n,), NaN = undefined


@dataclass(frozen=True, slots=True)
class AlignedKL:
    """KL divergences between two traces at their aligned positions (see module doc)."""

    starts: np.ndarray  # character offset of each aligned position
    ends: np.ndarray  # max of both tokens' ends
    index_a: np.ndarray  # step index in trace A
    index_b: np.ndarray  # step index in trace B
    kl_ab: np.ndarray  # KL(A || B)
    kl_ba: np.ndarray  # KL(B || A)
    kl: np.ndarray  # (kl_ab + kl_ba) / 2
    coverage: float  # 2 |aligned| / (|starts A| + |starts B|)


# --------------------------------------------------------------------------- entropy


def entropy_with_tail(top_logprobs: np.ndarray, vocab_size: int | None) -> np.ndarray:
    """Entropy (nats) of each row of known log-probs (``-inf`` = padding), tail included.

    ``top_logprobs`` has shape (..., k); the result has shape (...). With ``vocab_size``
    the tail is uniform over the ``vocab_size - n`` unlisted tokens (upper bound); with
    None it is one outcome (lower bound). See the module docstring.
    """
    lp = np.asarray(top_logprobs, dtype=float)
    if lp.ndim == 0:
        raise InputError("entropy_with_tail needs an array of log-probs, not a scalar")
    finite = np.isfinite(lp)
    safe = np.where(finite, lp, 0.0)
    p = np.where(finite, np.exp(safe), 0.0)
    h = -np.sum(p * safe, axis=-1)
    tail = np.clip(1.0 - p.sum(axis=-1), 0.0, 1.0)
    buckets = np.ones_like(tail) if vocab_size is None else _tail_buckets(finite, vocab_size)
    live = (tail > 0) & (buckets > 0)
    ratio = np.where(live, tail / np.where(buckets > 0, buckets, 1.0), 1.0)
    return h - np.where(live, tail * np.log(ratio), 0.0)


def _tail_buckets(finite: np.ndarray, vocab_size: int) -> np.ndarray:
    listed = finite.sum(axis=-1)
    if vocab_size < 1 or np.any(listed > vocab_size):
        raise InputError(
            f"vocab_size {vocab_size} is smaller than the number of listed tokens "
            f"({int(listed.max(initial=0))}): pass the scorer's real vocabulary size"
        )
    return (vocab_size - listed).astype(float)


# --------------------------------------------------------------------------- per model


def _top_matrix(steps: Sequence[TokenStep]) -> np.ndarray:
    """(n, K) top-k log-probs padded with -inf (K >= 1)."""
    width = max([len(s.top) for s in steps] + [1])
    out = np.full((len(steps), width), -np.inf)
    for i, step in enumerate(steps):
        out[i, : len(step.top)] = [t.logprob for t in step.top]
    return out


def _answer_column(steps: Sequence[TokenStep]) -> np.ndarray:
    """(n, 1) answer-token log-prob where it is outside the top-k list, else -inf."""
    outside = [s.rank > len(s.top) for s in steps]
    lps = np.array([max(s.logprob, LOGPROB_FLOOR) for s in steps], dtype=float)
    return np.where(np.array(outside, dtype=bool), lps, -np.inf).reshape(-1, 1)


def _top_columns(top: np.ndarray) -> dict[str, np.ndarray]:
    probs = -np.sort(-np.exp(top), axis=1)  # exp(-inf) = 0; descending
    listed = np.isfinite(top).any(axis=1)
    return {
        "top1": np.where(listed, probs[:, 0], np.nan),
        "top5": np.where(listed, probs[:, :5].sum(axis=1), np.nan),
        "topk_mass": np.where(listed, probs.sum(axis=1), np.nan),
    }


def position_features(trace: TokenTrace, vocab_size: int | None = None) -> PositionSeries:
    """The per-position series of one trace (:data:`MODEL_SERIES`)."""
    steps = trace.steps
    lp = np.maximum(np.array([s.logprob for s in steps], dtype=float), LOGPROB_FLOOR)
    rank = np.maximum(np.array([s.rank for s in steps], dtype=float), 1.0)
    top = _top_matrix(steps)
    known = np.concatenate([top, _answer_column(steps)], axis=1)
    columns = {"logprob": lp, "prob": np.exp(lp), "rank": rank, "log_rank": np.log(rank)}
    columns |= _top_columns(top)
    columns["entropy"] = entropy_with_tail(known, vocab_size)
    columns["entropy_lb"] = entropy_with_tail(known, None)
    return PositionSeries(_starts(steps), _ends(steps), columns)


def _starts(steps: Sequence[TokenStep]) -> np.ndarray:
    return np.array([s.start for s in steps], dtype=int)


def _ends(steps: Sequence[TokenStep]) -> np.ndarray:
    return np.array([s.end for s in steps], dtype=int)


# --------------------------------------------------------------------------- alignment + KL


def align_positions(a: TokenTrace, b: TokenTrace) -> tuple[np.ndarray, np.ndarray, float]:
    """Step indices (ia, ib) where both traces start a token at the same character, and
    the coverage share. Raises InputError when the traces are of different answers."""
    if a.answer != b.answer:
        raise InputError(
            f"cannot align traces of different answers ({a.scorer!r} vs {b.scorer!r}): "
            "features compare traces of the same answer text"
        )
    first_a, first_b = _first_at(a.steps), _first_at(b.steps)
    shared = sorted(first_a.keys() & first_b.keys())
    ia = np.array([first_a[s] for s in shared], dtype=int)
    ib = np.array([first_b[s] for s in shared], dtype=int)
    total = len(first_a) + len(first_b)
    return ia, ib, (2.0 * len(shared) / total if total else 0.0)


def _first_at(steps: Sequence[TokenStep]) -> dict[int, int]:
    first: dict[int, int] = {}
    for i, step in enumerate(steps):
        first.setdefault(step.start, i)
    return first


@dataclass(frozen=True, slots=True)
class _Known:
    """One step's known outcomes: token string -> probability (duplicates summed)."""

    probs: dict[str, float]
    p_min: float  # smallest top-k probability (inf without a list)
    count: int  # listed outcomes before merging duplicates


def _known(step: TokenStep) -> _Known:
    probs: dict[str, float] = {}
    listed = [math.exp(t.logprob) for t in step.top]
    for top, p in zip(step.top, listed, strict=True):
        probs[top.token] = probs.get(top.token, 0.0) + p
    count = len(step.top)
    if step.rank > len(step.top):
        probs[step.token] = probs.get(step.token, 0.0) + math.exp(max(step.logprob, LOGPROB_FLOOR))
        count += 1
    return _Known(probs, min(listed, default=math.inf), count)


class _KnownCache:
    """Each trace's known outcomes, computed once per extraction (traces kept alive so
    their ids stay unique)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[TokenTrace, list[_Known]]] = {}

    def get(self, trace: TokenTrace) -> list[_Known]:
        hit = self._by_id.get(id(trace))
        if hit is None:
            hit = (trace, [_known(s) for s in trace.steps])
            self._by_id[id(trace)] = hit
        return hit[1]


def _layout(pairs: list[tuple[_Known, _Known]]) -> tuple[np.ndarray, ...]:
    """Dense (n, W) arrays over each position's union U (column 0 = OTHER); NaN = the
    model does not list that string."""
    unions = [list(dict.fromkeys([*ka.probs, *kb.probs])) for ka, kb in pairs]
    width = 1 + max([len(u) for u in unions] + [0])
    pa, pb = np.full((len(pairs), width), np.nan), np.full((len(pairs), width), np.nan)
    valid = np.zeros((len(pairs), width), dtype=bool)
    valid[:, 0] = True
    for i, ((ka, kb), union) in enumerate(zip(pairs, unions, strict=True)):
        n = 1 + len(union)
        valid[i, 1:n] = True
        pa[i, 1:n] = [ka.probs.get(t, np.nan) for t in union]
        pb[i, 1:n] = [kb.probs.get(t, np.nan) for t in union]
    known_a, known_b = ~np.isnan(pa), ~np.isnan(pb)
    return np.nan_to_num(pa), known_a, np.nan_to_num(pb), known_b, valid


def _smooth(
    probs: np.ndarray,
    known: np.ndarray,
    valid: np.ndarray,
    facts: tuple[np.ndarray, np.ndarray],
    vocab_size: int | None,
) -> np.ndarray:
    """Complete each row to a distribution over U + OTHER (see module doc: KL smoothing)."""
    p_min, count = facts
    tail = np.clip(1.0 - np.where(known, probs, 0.0).sum(axis=1), 0.0, 1.0)
    missing = (valid & ~known)[:, 1:].sum(axis=1)
    n_tail = missing + 1.0 if vocab_size is None else vocab_size - count
    q = np.minimum(tail / np.maximum(n_tail, 1.0), p_min)
    out = np.where(known, probs, np.where(valid, q[:, None], 0.0))
    out[:, 0] = np.maximum(tail - missing * q, 0.0)
    out = np.where(valid, np.maximum(out, KL_EPS), 0.0)
    return out / out.sum(axis=1, keepdims=True)


def _kl_rows(p: np.ndarray, q: np.ndarray, valid: np.ndarray) -> np.ndarray:
    ratio = np.where(valid, p / np.where(valid, q, 1.0), 1.0)
    return np.sum(np.where(valid, p * np.log(ratio), 0.0), axis=1)


def _facts(knowns: list[_Known]) -> tuple[np.ndarray, np.ndarray]:
    p_min = np.array([k.p_min for k in knowns], dtype=float)
    return p_min, np.array([k.count for k in knowns], dtype=float)


def pairwise_kl(
    a: TokenTrace, b: TokenTrace, *, vocab_a: int | None = None, vocab_b: int | None = None
) -> AlignedKL:
    """KL divergences between two traces of one answer at their aligned positions."""
    return _pairwise_kl(a, b, (vocab_a, vocab_b), _KnownCache())


def _pairwise_kl(
    a: TokenTrace, b: TokenTrace, vocabs: tuple[int | None, int | None], cache: _KnownCache
) -> AlignedKL:
    vocab_a, vocab_b = vocabs
    ia, ib, coverage = align_positions(a, b)
    known_a, known_b = cache.get(a), cache.get(b)
    ka = [known_a[i] for i in ia]
    kb = [known_b[i] for i in ib]
    pa, ma, pb, mb, valid = _layout(list(zip(ka, kb, strict=True)))
    sa = _smooth(pa, ma, valid, _facts(ka), vocab_a)
    sb = _smooth(pb, mb, valid, _facts(kb), vocab_b)
    kl_ab, kl_ba = _kl_rows(sa, sb, valid), _kl_rows(sb, sa, valid)
    ends = np.maximum(_ends(a.steps)[ia], _ends(b.steps)[ib])
    return AlignedKL(
        _starts(a.steps)[ia], ends, ia, ib, kl_ab, kl_ba, (kl_ab + kl_ba) / 2.0, coverage
    )


def _pair_series(aligned: AlignedKL, a: PositionSeries, b: PositionSeries) -> PositionSeries:
    """The pair's series at the aligned positions: the KLs, and where the two models
    disagree on the same text: ``dlogprob`` (A's answer-token log-prob minus B's) and
    ``dentropy`` (A's entropy minus B's, the lower bound: comparable across vocabularies)."""
    ia, ib = aligned.index_a, aligned.index_b
    cols = {"kl": aligned.kl, "kl_ab": aligned.kl_ab, "kl_ba": aligned.kl_ba,
            "dlogprob": a.columns["logprob"][ia] - b.columns["logprob"][ib],
            "dentropy": a.columns["entropy_lb"][ia] - b.columns["entropy_lb"][ib]}
    return PositionSeries(aligned.starts, aligned.ends, cols)


# --------------------------------------------------------------------------- rephrasings


def rephrase_features(
    original: TokenTrace, rephrasings: Sequence[TokenTrace], vocab_size: int | None = None
) -> PositionSeries:
    """``logprob_std`` and mean symmetric ``kl`` to the original, per original position
    present in every rephrasing (empty when there are no rephrasings)."""
    return _rephrase(original, rephrasings, vocab_size, _KnownCache())


def _rephrase(
    original: TokenTrace,
    rephrasings: Sequence[TokenTrace],
    vocab_size: int | None,
    cache: _KnownCache,
) -> PositionSeries:
    if not rephrasings:
        return _empty_series(REPHRASE_SERIES)
    aligned = [_pairwise_kl(original, r, (vocab_size, vocab_size), cache) for r in rephrasings]
    common = set(aligned[0].index_a.tolist())
    for al in aligned[1:]:
        common &= set(al.index_a.tolist())
    idx = np.array(sorted(common), dtype=int)
    lps = [_logprobs(original.steps)[idx]]
    kls = []
    for al, reph in zip(aligned, rephrasings, strict=True):
        where = {int(i): k for k, i in enumerate(al.index_a)}
        pick = np.array([where[int(i)] for i in idx], dtype=int)
        lps.append(_logprobs(reph.steps)[al.index_b[pick]])
        kls.append(al.kl[pick])
    cols = {"logprob_std": np.std(np.vstack(lps), axis=0), "kl": np.mean(np.vstack(kls), axis=0)}
    return PositionSeries(_starts(original.steps)[idx], _ends(original.steps)[idx], cols)


def _logprobs(steps: Sequence[TokenStep]) -> np.ndarray:
    return np.maximum(np.array([s.logprob for s in steps], dtype=float), LOGPROB_FLOOR)


def _empty_series(names: Sequence[str]) -> PositionSeries:
    empty = np.zeros(0, dtype=int)
    return PositionSeries(empty, empty, {n: np.zeros(0) for n in names})


# --------------------------------------------------------------------------- per answer


def model_pairs(n: int) -> list[tuple[int, int]]:
    """The (i, j), i < j, pairs of ``n`` scorers, in order."""
    return [(i, j) for i in range(n) for j in range(i + 1, n)]


def pair_name(i: int, j: int) -> str:
    """The name of the scorer pair (i, j) in feature names: ``m{i}_m{j}``."""
    return f"m{i}_m{j}"


@dataclass(frozen=True, slots=True)
class AnswerSeries:
    """Everything computed once per answer, before aggregation per unit."""

    answer: str
    series: dict[str, PositionSeries]  # key prefix ("m0", "kl", "reph.m0"...) by group
    scalars: dict[str, float]  # answer-level scalars (coverage, n_variants)


def _split_variants(traces: Sequence[TokenTrace]) -> tuple[TokenTrace | None, list[TokenTrace]]:
    usable = [t for t in traces if t.error is None]
    original = next((t for t in usable if t.prompt_variant == ORIGINAL), None)
    if original is None:
        return None, []
    return original, [t for t in usable if t is not original]


def _answer_of(traces_by_scorer: Mapping[str, Sequence[TokenTrace]]) -> str:
    answers = {t.answer for traces in traces_by_scorer.values() for t in traces}
    if len(answers) != 1:
        raise InputError(
            f"extract_features needs traces of one answer; got {len(answers)} different "
            "answer texts"
        )
    return answers.pop()


def answer_series(
    traces_by_scorer: Mapping[str, Sequence[TokenTrace]],
    vocab_sizes: Mapping[str, int],
    rephrasings: bool,
) -> AnswerSeries:
    """The series of every scorer, scorer pair and (with ``rephrasings``) rephrasing set of
    one answer's traces (scorer ``i`` is ``m{i}``)."""
    answer = _answer_of(traces_by_scorer)
    variants = {s: _split_variants(ts) for s, ts in traces_by_scorer.items()}
    series: dict[str, PositionSeries] = {}
    scalars: dict[str, float] = {}
    cache = _KnownCache()
    for i, (scorer, (original, rephs)) in enumerate(variants.items()):
        if original is None:
            continue
        series[f"m{i}"] = position_features(original, vocab_sizes.get(scorer))
        if rephrasings and rephs:
            vocab = vocab_sizes.get(scorer)
            series[f"reph.m{i}"] = _rephrase(original, rephs, vocab, cache)
            scalars[f"reph.m{i}.n_variants"] = float(len(rephs))
    originals = [(s, v[0]) for s, v in variants.items()]
    for i, j in model_pairs(len(originals)):
        (sa, ta), (sb, tb) = originals[i], originals[j]
        if ta is None or tb is None:
            continue
        vocabs = (vocab_sizes.get(sa), vocab_sizes.get(sb))
        aligned = _pairwise_kl(ta, tb, vocabs, cache)
        series[f"pair.{pair_name(i, j)}"] = _pair_series(aligned, series[f"m{i}"],
                                                         series[f"m{j}"])
        scalars[f"kl.{pair_name(i, j)}.coverage"] = aligned.coverage
    return AnswerSeries(answer, series, scalars)
