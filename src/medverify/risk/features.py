"""Features for the database-free hallucination classifier: the per-position series of
:mod:`medverify.risk.series` (computed from :class:`TokenTrace`; see that module for the
series, the entropy with the tail, the alignment across tokenizers, KL smoothing and the
rephrasings) aggregated per unit into named, ordered features (:func:`build_schema`), and
feature rows turned into vectors.

Aggregation
-----------
A unit (answer, sentence from :func:`medverify.decompose.segment`, or claim span) takes
the positions whose span overlaps it: ``start < unit.end and max(end, start + 1) >
unit.start``. Each series gives :data:`STATS`: ``mean``; ``var`` (population, ddof 0);
``skew`` = m3 / m2^1.5, ``kurt`` = m4 / m2^2 - 3 (excess), ``m5`` = m5 / m2^2.5 (fifth
standardized moment, "hyperskewness"), with m_k the k-th central moment (biased, equal to
``scipy.stats.skew/kurtosis(bias=True)``); ``min``, ``max``; ``q10``..``q90`` (numpy
linear interpolation). A statistic is undefined with no values; skew needs >= 3 values,
kurt >= 4, m5 >= 5, and all three a non-zero variance. Undefined features are listed in
``FeatureRow.missing`` and take :data:`FILL_VALUE` (0.0), so every vector is complete.

Scalars per unit: ``m{i}.n_tokens`` (positions in the unit), ``kl.m{i}_m{j}.coverage``
(answer level), ``reph.m{i}.n_variants``, ``unit.n_chars`` and, below answer level,
``unit.rel_start`` (unit start / answer length). Models are named by their index in the
scorer list (``m0``, ``m1``...) so a schema transfers between machines; the ids are in
``FeatureSchema.scorers``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from medverify.decompose import segment
from medverify.errors import InputError
from medverify.records import Claim, Span
from medverify.risk.records import FeatureRow, FeatureSchema, Granularity, TokenTrace
from medverify.risk.series import (
    MODEL_SERIES,
    PAIR_SERIES,
    REPHRASE_SERIES,
    AnswerSeries,
    PositionSeries,
    answer_series,
    model_pairs,
    pair_name,
)

FEATURE_SCHEMA_VERSION = "2"  # 2: dlogprob, dentropy pair series
FILL_VALUE = 0.0

STATS: tuple[str, ...] = (
    "mean", "var", "skew", "kurt", "m5", "min", "max", "q10", "q25", "q50", "q75", "q90",
)
_QUANTILES = (("q10", 0.10), ("q25", 0.25), ("q50", 0.50), ("q75", 0.75), ("q90", 0.90))
_MIN_COUNT = {"skew": 3, "kurt": 4, "m5": 5}
_GRANULARITIES = ("answer", "sentence", "claim")

Unit = tuple[str, Span, str]  # (unit id, span in the answer, text)


# --------------------------------------------------------------------------- statistics


def describe(values: np.ndarray) -> dict[str, float | None]:
    """:data:`STATS` of the finite values (None = undefined; see module doc)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return dict.fromkeys(STATS)
    mean = float(x.mean())
    dev = x - mean
    m2 = float(np.mean(dev**2))
    out: dict[str, float | None] = {"mean": mean, "var": m2}
    flat = bool(x.max() == x.min()) or m2 <= 0.0
    for name, power, shift in (("skew", 3, 0.0), ("kurt", 4, 3.0), ("m5", 5, 0.0)):
        defined = x.size >= _MIN_COUNT[name] and not flat
        out[name] = float(np.mean(dev**power) / m2 ** (power / 2) - shift) if defined else None
    out["min"], out["max"] = float(x.min()), float(x.max())
    levels = np.quantile(x, [q for _, q in _QUANTILES])
    out |= {name: float(v) for (name, _), v in zip(_QUANTILES, levels, strict=True)}
    return out


# --------------------------------------------------------------------------- schema


def _series_keys(n_scorers: int, rephrasings: bool) -> list[str]:
    keys = [f"m{i}.{s}" for i in range(n_scorers) for s in MODEL_SERIES]
    keys += [f"{s}.{pair_name(i, j)}" for i, j in model_pairs(n_scorers) for s in PAIR_SERIES]
    if rephrasings:
        keys += [f"reph.m{i}.{s}" for i in range(n_scorers) for s in REPHRASE_SERIES]
    return keys


def _scalar_keys(n_scorers: int, rephrasings: bool, granularity: Granularity) -> list[str]:
    keys = [f"m{i}.n_tokens" for i in range(n_scorers)]
    keys += [f"kl.{pair_name(i, j)}.coverage" for i, j in model_pairs(n_scorers)]
    if rephrasings:
        keys += [f"reph.m{i}.n_variants" for i in range(n_scorers)]
    keys.append("unit.n_chars")
    if granularity != "answer":
        keys.append("unit.rel_start")
    return keys


def _check_granularity(granularity: str) -> Granularity:
    if granularity not in _GRANULARITIES:
        raise InputError(f"unknown granularity {granularity!r}: use one of {_GRANULARITIES}")
    return granularity  # type: ignore[return-value]


def feature_names(
    scorers: Sequence[str], *, rephrasings: bool, granularity: Granularity
) -> list[str]:
    """The feature names, in their stable order, for this scorer list and options."""
    _check_granularity(granularity)
    if not scorers:
        raise InputError("features need at least one scorer")
    series = [f"{key}.{stat}" for key in _series_keys(len(scorers), rephrasings) for stat in STATS]
    return series + _scalar_keys(len(scorers), rephrasings, granularity)


def build_schema(
    scorers: Sequence[str], *, rephrasings: bool, granularity: Granularity
) -> FeatureSchema:
    names = feature_names(scorers, rephrasings=rephrasings, granularity=granularity)
    return FeatureSchema(
        version=FEATURE_SCHEMA_VERSION, granularity=granularity, scorers=list(scorers), names=names
    )


# --------------------------------------------------------------------------- units


def claim_units(claims: Sequence[Claim]) -> list[Unit]:
    """Units for the claims that have a span (claims without one cannot be placed)."""
    return [(c.id, c.span, c.text) for c in claims if c.span is not None]


def resolve_units(
    answer: str, granularity: Granularity, units: Sequence[Unit] | None
) -> list[Unit]:
    """The given units (checked against the answer), or the answer / its sentences."""
    if units is not None:
        for unit_id, span, _ in units:
            if span.end > len(answer):
                raise InputError(
                    f"unit {unit_id!r} span [{span.start}, {span.end}) is past the end of "
                    f"the answer ({len(answer)} characters)"
                )
        return list(units)
    if granularity == "answer":
        return [("answer", Span(start=0, end=len(answer)), answer)]
    if granularity == "sentence":
        return [(f"s{s.index}", Span(start=s.start, end=s.end), s.text) for s in segment(answer)]
    raise InputError("claim granularity needs the claim spans: pass units=claim_units(claims)")


# --------------------------------------------------------------------------- extraction


def _in_unit(series: PositionSeries, span: Span) -> np.ndarray:
    return (series.starts < span.end) & (np.maximum(series.ends, series.starts + 1) > span.start)


def _unit_values(prep: AnswerSeries, span: Span) -> dict[str, float | None]:
    values: dict[str, float | None] = dict(prep.scalars)
    for group, series in prep.series.items():
        mask = _in_unit(series, span)
        if group[1:].isdigit():  # a model's own series: "m0", "m1"...
            values[f"{group}.n_tokens"] = float(mask.sum())
        for column, data in series.columns.items():
            key = _series_key(group, column)
            for stat, value in describe(data[mask]).items():
                values[f"{key}.{stat}"] = value
    return values


def _series_key(group: str, column: str) -> str:
    if group.startswith("pair."):
        return f"{column}.{group.removeprefix('pair.')}"
    return f"{group}.{column}"


def _unit_scalars(answer: str, span: Span, granularity: Granularity) -> dict[str, float]:
    out = {"unit.n_chars": float(span.end - span.start)}
    if granularity != "answer":
        out["unit.rel_start"] = span.start / len(answer) if answer else 0.0
    return out


def _row(
    unit: Unit, granularity: Granularity, computed: Mapping[str, float | None], names: list[str]
) -> FeatureRow:
    unit_id, span, text = unit
    values: dict[str, float] = {}
    missing: list[str] = []
    for name in names:
        value = computed.get(name)
        if value is None or not math.isfinite(value):
            missing.append(name)
            value = FILL_VALUE
        values[name] = float(value)
    return FeatureRow(
        unit_id=unit_id, granularity=granularity, text=text, span=span,
        values=values, missing=missing,
    )


def extract_features(
    traces_by_scorer: Mapping[str, Sequence[TokenTrace]],
    *,
    granularity: Granularity,
    units: Sequence[Unit] | None = None,
    vocab_sizes: Mapping[str, int] | None = None,
    rephrasings: bool | None = None,
) -> list[FeatureRow]:
    """One :class:`FeatureRow` per unit, values named and ordered as :func:`build_schema`
    (scorers in the mapping's order). Each scorer's list holds its ``"original"`` trace
    and any rephrasings; ``rephrasings`` None means "whenever a scorer has more than one
    trace". Traces with an ``error`` give no features (their features are missing)."""
    _check_granularity(granularity)
    if not traces_by_scorer or not any(traces_by_scorer.values()):
        raise InputError("extract_features needs at least one scorer with traces")
    if rephrasings is None:
        rephrasings = any(len(ts) > 1 for ts in traces_by_scorer.values())
    scorers = list(traces_by_scorer)
    names = feature_names(scorers, rephrasings=rephrasings, granularity=granularity)
    prep = answer_series(traces_by_scorer, vocab_sizes or {}, rephrasings)
    rows = []
    for unit in resolve_units(prep.answer, granularity, units):
        computed = _unit_values(prep, unit[1]) | _unit_scalars(prep.answer, unit[1], granularity)
        rows.append(_row(unit, granularity, computed, names))
    return rows


# --------------------------------------------------------------------------- vectors


def validate_rows(rows: Sequence[FeatureRow], schema: FeatureSchema) -> None:
    """Raise InputError unless every row was built with ``schema`` (this version)."""
    if schema.version != FEATURE_SCHEMA_VERSION:
        raise InputError(
            f"feature schema version {schema.version!r} is not supported by this medverify "
            f"(feature schema {FEATURE_SCHEMA_VERSION!r}): re-extract the features and "
            "retrain the classifier"
        )
    expected = set(schema.names)
    for row in rows:
        if row.granularity != schema.granularity:
            raise InputError(
                f"row {row.unit_id!r} is at {row.granularity!r} granularity but the schema "
                f"is {schema.granularity!r}"
            )
        if set(row.values) != expected:
            raise InputError(_mismatch(row, expected))


def _mismatch(row: FeatureRow, expected: set[str]) -> str:
    extra = sorted(set(row.values) - expected)[:3]
    absent = sorted(expected - set(row.values))[:3]
    return (
        f"row {row.unit_id!r} was not built with this feature schema (version "
        f"{FEATURE_SCHEMA_VERSION!r}; unexpected {extra}, absent {absent}): re-extract "
        "its features with the same scorers and options"
    )


def vectorize(rows: Sequence[FeatureRow], schema: FeatureSchema) -> np.ndarray:
    """(n_rows, n_features) float matrix in schema order; missing features -> FILL_VALUE."""
    validate_rows(rows, schema)
    out = np.empty((len(rows), len(schema.names)), dtype=float)
    for r, row in enumerate(rows):
        missing = set(row.missing)
        out[r] = [FILL_VALUE if n in missing else row.values[n] for n in schema.names]
    if not np.all(np.isfinite(out)):
        raise InputError("feature rows hold non-finite values that are not marked missing")
    return out
