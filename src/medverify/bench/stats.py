"""Pairwise comparisons of models in a benchmark study, with a stated test.

For each metric and each pair of models (A, B), over the questions *both* models have an
audited answer for:

- the value of each model is the pooled ratio the audit defines (``medverify.audit.metrics``):
  URL validity = valid URLs / URLs, statement-level support = supported / scored claims,
  response-level support = supported responses / responses whose support is known, unused
  sources = unused valid sources / valid sources whose use is known;
- the difference is A - B, with a 95 % percentile interval from a *paired bootstrap over
  questions*: question ids are resampled with replacement and both pooled ratios are
  recomputed on the same resample;
- the two-sided p-value comes from a *paired permutation test*: under the null hypothesis
  that the two models are exchangeable on each question, A's and B's per-question counts
  are swapped at random per question; ``p = (1 + #{|d*| >= |d|}) / (1 + n_perm)``
  (a resample whose ratio is undefined counts as extreme: conservative);
- p-values are Holm-Bonferroni adjusted across all pairs of the same metric.

Everything works on per-question (numerator, denominator) arrays and is vectorised with
numpy: resamples are weight matrices multiplied with the count arrays.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Literal

import numpy as np

from medverify.audit.metrics import answer_metrics, source_use
from medverify.audit.records import AnswerAudit
from medverify.bench.records import BenchOrigin, Comparison
from medverify.stats import ALPHA, bootstrap_weights, percentile_ci

METRICS = ("url_validity", "statement_support", "response_support", "unused_sources")
_CELLS = 1 << 22  # resample weights drawn at once (rows x questions)
_KEEP_CELLS = 1 << 24  # resamples kept for reuse by later pairs, in all (64 MiB of float32)
_TIE = 1e-12  # |d*| >= |d| - _TIE: permuted differences equal to d up to rounding count


# -- per-question counts --------------------------------------------------------------------


def question_key(audit: AnswerAudit) -> str:
    """The question an audited answer replies to: its :class:`BenchOrigin` question id, else
    the part of the answer id after ``::`` (``model::question``), else the answer id."""
    value = BenchOrigin.of(audit.answer).question_id
    if value is not None:
        return value
    return audit.answer.id.split("::", 1)[-1]


def answer_counts(audit: AnswerAudit) -> dict[str, tuple[int, int]]:
    """(numerator, denominator) of every metric for one audited answer."""
    m = answer_metrics(audit)
    use = [u for u in source_use(audit) if u is not None]
    return {
        "url_validity": (m.n_valid_urls, m.n_urls),
        "statement_support": (m.n_supported, m.n_scored),
        "response_support": (int(m.response_support is True), int(m.response_support is not None)),
        "unused_sources": (sum(1 for u in use if not u), len(use)),
    }


@dataclass(frozen=True)
class CountTable:
    """One model's counts: ``counts[i, k] = (numerator, denominator)`` of metric ``k`` on
    question ``questions[i]``."""

    questions: list[str]
    metrics: tuple[str, ...]
    counts: np.ndarray  # shape (questions, metrics, 2)

    def rows(self, questions: Sequence[str]) -> np.ndarray:
        index = {q: i for i, q in enumerate(self.questions)}
        return self.counts[[index[q] for q in questions]]


def count_table(audits: Sequence[AnswerAudit], metrics: Sequence[str] = METRICS) -> CountTable:
    """Per-question counts of one model's audits (the last audit per question wins)."""
    by_question = {question_key(a): a for a in audits}
    counts = np.zeros((len(by_question), len(metrics), 2), dtype=float)
    for i, audit in enumerate(by_question.values()):
        per_metric = answer_counts(audit)
        counts[i] = [per_metric[m] for m in metrics]
    return CountTable(list(by_question), tuple(metrics), counts)


# -- resampling -----------------------------------------------------------------------------


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _blocks(total: int, n: int) -> Iterator[int]:
    """Row counts of the blocks that ``total`` resamples of ``n`` questions are drawn in."""
    rows = max(1, _CELLS // max(n, 1))
    for done in range(0, total, rows):
        yield min(rows, total - done)


def swap_masks(n: int, rows: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` x ``n`` fair coin flips (1.0 = swap the two models on that question)."""
    bits = np.unpackbits(np.frombuffer(rng.bytes(-(-rows * n // 8)), dtype=np.uint8))
    return bits[: rows * n].reshape(rows, n).astype(np.float32)


class Resamples:
    """Bootstrap weights and swap masks, drawn from ``seed`` per number of questions.

    Every pair of models with the same number of common questions gets the same resamples
    (each pair's test is exact on its own; Holm needs no independence between them), so
    they are drawn once and kept while all kept resamples fit in ``_KEEP_CELLS`` cells.
    Weights are float32: integer sums stay exact below 2**24.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._kept: dict[tuple[str, int, int], list[np.ndarray]] = {}
        self._cells = 0

    def blocks(self, kind: Literal["boot", "perm"], n: int, total: int) -> list[np.ndarray]:
        key = (kind, n, total)
        if key in self._kept:
            return self._kept[key]
        draw = bootstrap_weights if kind == "boot" else swap_masks
        rng = np.random.default_rng(self.seed)
        found = [draw(n, rows, rng) for rows in _blocks(total, n)]
        if self._cells + n * total <= _KEEP_CELLS:
            self._kept[key] = found
            self._cells += n * total
        return found


def _pair_differences(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A - B per row, from summed counts of shape (rows, metrics, 2)."""
    a, b = a.astype(float), b.astype(float)
    return _ratio(a[..., 0], a[..., 1]) - _ratio(b[..., 0], b[..., 1])


def bootstrap_differences(
    a: np.ndarray, b: np.ndarray, n_boot: int, resamples: Resamples
) -> np.ndarray:
    """Differences (n_boot, metrics) of pooled ratios on paired resamples of questions.
    ``a`` and ``b``: counts of shape (questions, metrics, 2), rows aligned by question."""
    n, k = a.shape[0], a.shape[1]
    flat_a = a.reshape(n, 2 * k).astype(np.float32)
    flat_b = b.reshape(n, 2 * k).astype(np.float32)
    out = []
    for weights in resamples.blocks("boot", n, n_boot):
        rows = weights.shape[0]
        sums_a = (weights @ flat_a).reshape(rows, k, 2)
        sums_b = (weights @ flat_b).reshape(rows, k, 2)
        out.append(_pair_differences(sums_a, sums_b))
    return np.concatenate(out)


def permutation_differences(
    a: np.ndarray, b: np.ndarray, n_perm: int, resamples: Resamples
) -> np.ndarray:
    """Differences (n_perm, metrics) after swapping A's and B's counts on random questions."""
    n, k = a.shape[0], a.shape[1]
    delta = (b - a).reshape(n, 2 * k).astype(np.float32)
    total_a, total_b = a.sum(axis=0), b.sum(axis=0)
    out = []
    for masks in resamples.blocks("perm", n, n_perm):
        shift = (masks @ delta).reshape(masks.shape[0], k, 2).astype(float)
        out.append(_pair_differences(total_a + shift, total_b - shift))
    return np.concatenate(out)


def permutation_p(observed: float, resampled: np.ndarray) -> float:
    """Two-sided permutation p-value; undefined resamples count as extreme."""
    extreme = ~(np.abs(resampled) < abs(observed) - _TIE)
    return float((1 + extreme.sum()) / (1 + resampled.size))


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values (None stays None and is not counted)."""
    present = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1.0, (len(present) - rank) * p))
        adjusted[i] = running
    return adjusted


# -- comparisons ----------------------------------------------------------------------------


def describe_test(n_questions: int, n_boot: int, n_perm: int, n_pairs: int) -> str:
    return (
        f"paired over the {n_questions:,} questions both models answered (n: those where "
        f"both have a value for the metric): 95 % CI from a "
        f"paired bootstrap of questions ({n_boot:,} resamples); two-sided paired "
        f"permutation test ({n_perm:,} random per-question swaps of the two models' counts, "
        f"p = (1 + #|d*| >= |d|) / (1 + {n_perm:,})); Holm-Bonferroni adjusted across the "
        f"{n_pairs} model pair{'s' if n_pairs != 1 else ''} of this metric"
    )


def _value(counts: np.ndarray) -> float | None:
    num, den = counts
    return float(num / den) if den > 0 else None


@dataclass(frozen=True)
class _Options:
    metrics: tuple[str, ...]
    n_boot: int
    n_perm: int
    resamples: Resamples
    n_pairs: int


def compare_pair(
    name_a: str, name_b: str, table_a: CountTable, table_b: CountTable, options: _Options
) -> list[Comparison]:
    """One :class:`Comparison` per metric for models A and B (``p_holm`` not yet set)."""
    shared = set(table_b.questions)
    common = [q for q in table_a.questions if q in shared]
    a, b = table_a.rows(common), table_b.rows(common)
    test = describe_test(len(common), options.n_boot, options.n_perm, options.n_pairs)
    draws = options.resamples
    boot = bootstrap_differences(a, b, options.n_boot, draws) if common else None
    perm = permutation_differences(a, b, options.n_perm, draws) if common else None
    return [
        _comparison(metric, (name_a, name_b), (a[:, k], b[:, k]), test,
                    None if boot is None else boot[:, k], None if perm is None else perm[:, k])
        for k, metric in enumerate(options.metrics)
    ]


def _comparison(
    metric: str,
    names: tuple[str, str],
    counts: tuple[np.ndarray, np.ndarray],
    test: str,
    boot: np.ndarray | None,
    perm: np.ndarray | None,
) -> Comparison:
    value_a, value_b = (_value(x.sum(axis=0)) for x in counts)
    item = Comparison(metric=metric, model_a=names[0], model_b=names[1],
                      n_questions=int(((counts[0][:, 1] > 0) & (counts[1][:, 1] > 0)).sum()),
                      value_a=value_a, value_b=value_b, test=test)
    if value_a is None or value_b is None or boot is None or perm is None:
        return item
    diff = value_a - value_b
    update = {"difference": diff, "ci": percentile_ci(boot), "p_value": permutation_p(diff, perm)}
    return item.model_copy(update=update)


def _with_holm(comparisons: list[Comparison], metrics: Sequence[str]) -> list[Comparison]:
    for metric in metrics:
        group = [c for c in comparisons if c.metric == metric]
        for item, adjusted in zip(group, holm([c.p_value for c in group]), strict=True):
            item.p_holm = adjusted
    return comparisons


def compare_tables(
    tables: Mapping[str, CountTable], *, n_boot: int = 2000, n_perm: int = 10_000, seed: int = 0
) -> list[Comparison]:
    """Every pair of models (in mapping order, A before B) on every metric of their count
    tables (all built for the same metrics), metric by metric."""
    if n_boot < 1 or n_perm < 1:
        raise ValueError("n_boot and n_perm must be at least 1")
    metrics = next(iter(tables.values())).metrics if tables else METRICS
    pairs = list(combinations(tables, 2))
    options = _Options(metrics, n_boot, n_perm, Resamples(seed), len(pairs))
    found = [c for a, b in pairs for c in compare_pair(a, b, tables[a], tables[b], options)]
    ordered = sorted(found, key=lambda c: metrics.index(c.metric))
    return _with_holm(ordered, metrics)


def compare_models(
    audits_by_model: Mapping[str, Sequence[AnswerAudit]],
    *,
    metrics: Sequence[str] = METRICS,
    n_boot: int = 2000,
    n_perm: int = 10_000,
    seed: int = 0,
) -> list[Comparison]:
    """Every pair of models (in mapping order, A before B) on every metric, metric by
    metric; see the module docstring for the test."""
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}: choose from {list(METRICS)}")
    tables = {name: count_table(audits, metrics) for name, audits in audits_by_model.items()}
    return compare_tables(tables, n_boot=n_boot, n_perm=n_perm, seed=seed)


def significant(comparisons: Sequence[Comparison], alpha: float = ALPHA) -> list[Comparison]:
    """The comparisons whose Holm-adjusted p-value is below ``alpha``."""
    return [c for c in comparisons if c.p_holm is not None and c.p_holm < alpha]
