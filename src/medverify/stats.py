"""The statistics every layer shares (pure math on numbers and numpy arrays, no medverify
import): the Wilson score interval of a proportion, percentile-bootstrap intervals (of a
statistic of values, and of a metric over paired labels), bootstrap resamples as count
weights, and the percentile interval of resampled values.

Every bootstrap here is seeded, so the same input gives the same interval."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

Stat = Callable[[np.ndarray], float]
"""A statistic of a 1-d array (``np.mean``, a pooled ratio, ...)."""

ALPHA = 0.05  # two-sided 95 % intervals
_BLOCK_CELLS = 1 << 22  # resampled values held at once by the vectorised mean

T = TypeVar("T")


def wilson(k: int, n: int, z: float = 1.96,
           digits: int | None = 4) -> tuple[float, float] | None:
    """The Wilson score interval of k successes in n trials (None for n = 0); ``z`` 1.96:
    two-sided 95 %, 1.645: the one-sided 95 % lower bound as its first element. Rounded to
    ``digits`` (None: not rounded)."""
    if n == 0:
        return None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low, high = max(0.0, centre - half), min(1.0, centre + half)
    return (low, high) if digits is None else (round(low, digits), round(high, digits))


def percentile_ci(values: np.ndarray | Sequence[float],
                  alpha: float = ALPHA) -> tuple[float, float] | None:
    """The ``alpha/2`` and ``1 - alpha/2`` percentiles of the finite values (None: none)."""
    data = np.asarray(values, dtype=float)
    finite = data[np.isfinite(data)]
    if finite.size == 0:
        return None
    low, high = np.percentile(finite, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(low), float(high)


def bootstrap_ci(values: Sequence[float] | np.ndarray, stat: Stat = np.mean, n: int = 2000,
                 alpha: float = ALPHA, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``stat(values)``.

    ``n`` resamples (with replacement, same size as ``values``) are drawn from a numpy
    generator seeded with ``seed``, so the interval is deterministic. The interval is
    the ``alpha/2`` and ``1 - alpha/2`` percentiles of the resampled statistics.
    Degenerate inputs: no values -> ``(nan, nan)``; one value ``v`` -> ``(v, v)``.
    """
    if n < 1:
        raise ValueError(f"bootstrap needs at least one resample, got n={n}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return (math.nan, math.nan)
    if data.size == 1:
        only = float(stat(data))
        return (only, only)
    stats = _resample(data, stat, n, np.random.default_rng(seed))
    low, high = np.percentile(stats, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return (float(low), float(high))


def _resample(data: np.ndarray, stat: Stat, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` bootstrap statistics, with memory bounded by ``_BLOCK_CELLS`` values."""
    size = data.size
    if stat is not np.mean:
        return np.fromiter(
            (stat(data[rng.integers(0, size, size)]) for _ in range(n)), dtype=float, count=n
        )
    rows = max(1, _BLOCK_CELLS // size)
    blocks = [
        data[rng.integers(0, size, (min(rows, n - done), size))].mean(axis=1)
        for done in range(0, n, rows)
    ]
    return np.concatenate(blocks)


def bootstrap_metric(gold: Sequence[T], predicted: Sequence[T],
                     metric: Callable[[Sequence[T], Sequence[T]], float | None],
                     seed: int, rounds: int = 1000,
                     alpha: float = ALPHA) -> tuple[float, float] | None:
    """The percentile bootstrap interval of ``metric(gold, predicted)``, the pairs resampled
    together ``rounds`` times; a resample where the metric is undefined (None) is left
    out. None when fewer than two pairs or no resample gives a value."""
    if len(gold) < 2:
        return None
    rng = np.random.default_rng(seed)
    g, p = np.asarray(gold), np.asarray(predicted)
    samples = []
    for _ in range(rounds):
        index = rng.integers(0, len(g), len(g))
        found = metric(g[index].tolist(), p[index].tolist())
        if found is not None:
            samples.append(found)
    return percentile_ci(np.asarray(samples, dtype=float), alpha) if samples else None


def bootstrap_weights(n: int, rows: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` bootstrap resamples of ``n`` items as counts: ``w[r, i]`` is how often item
    ``i`` was drawn in resample ``r`` (multiply them with per-item counts to resample sums)."""
    draws = rng.integers(0, n, size=(rows, n)) + n * np.arange(rows)[:, None]
    return np.bincount(draws.ravel(), minlength=rows * n).reshape(rows, n).astype(np.float32)
