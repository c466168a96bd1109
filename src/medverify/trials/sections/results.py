"""The posted-results sections: ``primary outcome statistical analysis``, ``primary outcome
results``, ``secondary outcome methods`` and ``secondary outcome key results`` (methods,
denominators and statistical analyses; one sentence per result row)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from medverify.trials.summary import (
    MAX_ANALYSES,
    MAX_LIST,
    MAX_OUTCOMES,
    MAX_ROWS,
    MEASURES,
    Line,
    Path,
    Sentence,
    not_given,
)


def _measures(study: dict[str, Any], kind: str) -> list[int]:
    """Indexes of the posted outcome measures of one type (PRIMARY, SECONDARY)."""
    items = Line(study).get(MEASURES) or []
    return [i for i, m in enumerate(items) if m.get("type") == kind][:MAX_OUTCOMES]


def _methods(study: dict[str, Any], indexes: Sequence[int]) -> list[Sentence]:
    out = []
    for i in indexes:
        base = (*MEASURES, i)
        line = Line(study)
        line.lit("For \"").val((*base, "title")).lit("\"")
        line.opt(" (time frame: ", (*base, "timeFrame"), ")")
        line.opt(", results are reported as ", (*base, "paramType"), enum=True)
        line.opt(" with ", (*base, "dispersionType"), " as dispersion")
        line.opt(", in ", (*base, "unitOfMeasure"))
        line.lit(".").opt(" Analysis population: ", (*base, "populationDescription"))
        out.append(line.sentence())
        denoms = _denominators(study, base)
        if denoms is not None:
            out.append(denoms)
        analyses = line.get((*base, "analyses")) or []
        for a in range(min(len(analyses), MAX_ANALYSES)):
            out.append(_analysis(study, (*base, "analyses", a)))
    return out


def _denominators(study: dict[str, Any], base: Path) -> Sentence | None:
    """The first denominator row of a measure: its units analyzed per group."""
    line = Line(study)
    groups = {g.get("id"): i for i, g in enumerate(line.get((*base, "groups")) or [])}
    counts = line.get((*base, "denoms", 0, "counts")) or []
    if not counts:
        return None
    line.val((*base, "denoms", 0, "units")).lit(" analyzed: ")
    for c in range(min(len(counts), MAX_LIST)):
        gid = counts[c].get("groupId")
        line.lit("; " if c else "")
        if gid in groups:
            line.val((*base, "groups", groups[gid], "title")).lit(" ")
        line.val((*base, "denoms", 0, "counts", c, "value"))
    return line.lit(".").sentence()


def _analysis(study: dict[str, Any], base: Path) -> Sentence:
    line = Line(study)
    line.lit("Statistical analysis")
    line.opt(" (", (*base, "estimateComment"), ")")
    line.lit(":")
    line.opt(" method ", (*base, "statisticalMethod"), ";")
    line.opt(" ", (*base, "nonInferiorityType"), " test;", enum=True)
    if line.has((*base, "paramType")):
        line.lit(" ").val((*base, "paramType")).opt(" ", (*base, "paramValue")).lit(";")
    if line.has((*base, "ciLowerLimit")) or line.has((*base, "ciUpperLimit")):
        line.lit(" ").opt("", (*base, "ciPctValue"), "% ").opt("", (*base, "ciNumSides"), " ",
                                                               enum=True)
        line.lit("confidence interval ").opt("", (*base, "ciLowerLimit")).lit(" to ")
        line.opt("", (*base, "ciUpperLimit")).lit(";")
    line.opt(" p-value ", (*base, "pValue"), ";")
    line.parts[-1] = line.parts[-1].rstrip(";:")
    line.lit(".").opt(" ", (*base, "groupDescription"))
    return line.sentence()


def _results(study: dict[str, Any], indexes: Sequence[int]) -> list[Sentence]:
    out = []
    for i in indexes:
        base = (*MEASURES, i)
        measure = Line(study).get(base) or {}
        groups = {g.get("id"): g_i for g_i, g in enumerate(measure.get("groups") or [])}
        rows = [(c, k) for c, cls in enumerate(measure.get("classes") or [])
                for k, _ in enumerate(cls.get("categories") or [])]
        if not rows:
            line = Line(study)
            line.lit("\"").val((*base, "title")).lit("\": no measurements are posted")
            line.opt(" (reporting status ", (*base, "reportingStatus"), ")", enum=True)
            out.append(line.lit(".").sentence())
        for c, k in rows[:MAX_ROWS]:
            out.append(_row(study, base, c, k, groups))
        if len(rows) > MAX_ROWS:
            line = Line(study)
            out.append(line.lit("Further rows of \"").val((*base, "title"))
                       .lit("\" are listed in the registry record.").sentence())
    return out


def _row(study: dict[str, Any], base: Path, c: int, k: int, groups: dict[Any, int]) -> Sentence:
    line = Line(study)
    cls = (*base, "classes", c)
    cat = (*cls, "categories", k)
    line.lit("\"").val((*base, "title")).lit("\"")
    line.opt(" (", (*cls, "title"), ")").opt(" [", (*cat, "title"), "]")
    line.opt(", ", (*base, "paramType"), enum=True).opt(" in ", (*base, "unitOfMeasure"))
    line.opt(" at ", (*base, "timeFrame")).lit(": ")
    measurements = line.get((*cat, "measurements")) or []
    for m in range(min(len(measurements), MAX_LIST)):
        at = (*cat, "measurements", m)
        gid = measurements[m].get("groupId")
        line.lit("; " if m else "")
        if gid in groups:
            line.val((*base, "groups", groups[gid], "title")).lit(" ")
        line.val((*at, "value"))
        if line.has((*at, "spread")):
            line.lit(" (").opt("", (*base, "dispersionType"), " ").val((*at, "spread")).lit(")")
        elif line.has((*at, "lowerLimit")) or line.has((*at, "upperLimit")):
            line.lit(" (").opt("", (*base, "dispersionType"), " ").opt("", (*at, "lowerLimit"))
            line.lit(" to ").opt("", (*at, "upperLimit")).lit(")")
        line.opt(" [", (*at, "comment"), "]")
    if len(measurements) > MAX_LIST:
        line.lit("; further groups are listed in the record")
    return line.lit(".").sentence()


def _has_results(study: dict[str, Any]) -> bool:
    return bool(Line(study).get(MEASURES))


def primary_analysis(study: dict[str, Any]) -> list[Sentence]:
    if not _has_results(study):
        return not_given("The registry record posts no results for the primary outcome.")
    return (_methods(study, _measures(study, "PRIMARY"))
            or not_given("The registry record posts no analysis for the primary outcome."))


def primary_results(study: dict[str, Any]) -> list[Sentence]:
    if not _has_results(study):
        return not_given("The registry record posts no results for the primary outcome.")
    return (_results(study, _measures(study, "PRIMARY"))
            or not_given("The registry record posts no results for the primary outcome."))


def secondary_methods(study: dict[str, Any]) -> list[Sentence]:
    if not _has_results(study):
        return not_given("The registry record posts no results for the secondary outcomes.")
    return (_methods(study, _measures(study, "SECONDARY"))
            or not_given("The registry record posts no results for the secondary outcomes."))


def secondary_results(study: dict[str, Any]) -> list[Sentence]:
    if not _has_results(study):
        return not_given("The registry record posts no results for the secondary outcomes.")
    return (_results(study, _measures(study, "SECONDARY"))
            or not_given("The registry record posts no results for the secondary outcomes."))
