"""The posted-results sections: ``primary outcome statistical analysis``, ``primary outcome
results``, ``secondary outcome methods`` and ``secondary outcome key results`` (methods,
denominators and statistical analyses; one sentence per result row). Every posted measure,
row, group, denominator and analysis is written; the secondary sections also hold the other
pre-specified and post-hoc measures (and any measure of another type), each named by type."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from medverify.trials.summary import (
    MEASURES,
    OUTCOME_TYPE_LABELS,
    Line,
    Path,
    Sentence,
    filled,
    group_index,
    not_given,
)


def _measures(study: dict[str, Any], primary: bool) -> list[int]:
    """Indexes of the posted outcome measures of the primary section (type PRIMARY) or of
    the secondary ones (every other type)."""
    items = Line(study).get(MEASURES) or []
    return [i for i, m in enumerate(items)
            if isinstance(m, dict) and (m.get("type") == "PRIMARY") == primary]


def _methods(study: dict[str, Any], indexes: Sequence[int]) -> list[Sentence]:
    out = []
    for i in indexes:
        base = (*MEASURES, i)
        line = Line(study)
        if line.has((*base, "type")):
            line.lit("For the ").val((*base, "type"), labels=OUTCOME_TYPE_LABELS)
            line.lit(" outcome \"")
        else:
            line.lit("For the outcome \"")
        line.opt("", (*base, "title")).lit("\"")
        line.opt(" (time frame: ", (*base, "timeFrame"), ")")
        line.opt(", results are reported as ", (*base, "paramType"), enum=True)
        line.opt(" with ", (*base, "dispersionType"), " as dispersion", enum=True)
        line.opt(", in ", (*base, "unitOfMeasure"))
        line.lit(".").opt(" Analysis population: ", (*base, "populationDescription"))
        out.append(line.sentence())
        out.extend(denominators(study, base, (*base, "groups")))
        analyses = line.get((*base, "analyses")) or []
        for a in range(len(analyses)):
            out.append(_analysis(study, base, a))
    return out


def denominators(study: dict[str, Any], base: Path, group_list: Path,
                 labels: tuple[Path, ...] = ()) -> list[Sentence]:
    """Each denominator row at ``base`` (a measure, one of its classes, the baseline module):
    its units analyzed per group, the groups titled from ``group_list``. ``labels``: the
    measure's title field, then the class title's, naming what the row counts."""
    line = Line(study)
    groups = group_index(line, group_list)
    out = []
    for d, denom in enumerate(line.get((*base, "denoms")) or []):
        counts = denom.get("counts") if isinstance(denom, dict) else None
        if not counts:
            continue
        line = Line(study)
        if labels:
            line.lit("\"").opt("", labels[0]).lit("\"")
            for label in labels[1:]:
                line.opt(" (", label, ")")
            line.lit(": ")
        line.opt("", (*base, "denoms", d, "units"), " ").lit("analyzed: ")
        for c in range(len(counts)):
            gid = counts[c].get("groupId")
            line.lit("; " if c else "")
            if gid in groups:
                line.group((*group_list, groups[gid]), " ")
            line.opt("", (*base, "denoms", d, "counts", c, "value"))
        out.append(line.lit(".").sentence())
    return out


def _analysis(study: dict[str, Any], measure: Path, a: int) -> Sentence:
    base = (*measure, "analyses", a)
    line = Line(study)
    line.lit("Statistical analysis")
    groups = group_index(line, (*measure, "groups"))
    compared = [g for g in line.get((*base, "groupIds")) or [] if g in groups]
    for n, gid in enumerate(compared):
        joint = " of groups " if n == 0 else " and " if n == len(compared) - 1 else ", "
        line.lit(joint).group((*measure, "groups", groups[gid]))
    line.opt(" (", (*base, "estimateComment"), ")")
    line.lit(":")
    line.opt(" method ", (*base, "statisticalMethod"), ";")
    line.opt(" ", (*base, "nonInferiorityType"), " test;", enum=True)
    if line.has((*base, "paramType")):
        line.lit(" ").val((*base, "paramType")).opt(" ", (*base, "paramValue"))
        if line.has((*base, "dispersionValue")):
            line.lit(" (").opt("", (*base, "dispersionType"), " ", enum=True)
            line.val((*base, "dispersionValue")).lit(")")
        line.lit(";")
    if line.has((*base, "ciLowerLimit")) or line.has((*base, "ciUpperLimit")):
        line.lit(" ").opt("", (*base, "ciPctValue"), "% ").opt("", (*base, "ciNumSides"), " ",
                                                               enum=True)
        line.lit("confidence interval ").opt("", (*base, "ciLowerLimit")).lit(" to ")
        line.opt("", (*base, "ciUpperLimit")).lit(";")
    line.opt(" p-value ", (*base, "pValue"), ";")
    line.parts[-1] = line.parts[-1].rstrip(";:")
    line.lit(".").opt(" ", (*base, "groupDescription"))
    line.opt(" ", (*base, "statisticalComment"))
    return line.sentence()


def _results(study: dict[str, Any], indexes: Sequence[int]) -> list[Sentence]:
    out = []
    for i in indexes:
        base = (*MEASURES, i)
        measure = Line(study).get(base) or {}
        groups = group_index(Line(study), (*base, "groups"))
        rows = [(c, k) for c, cls in enumerate(measure.get("classes") or [])
                for k, _ in enumerate(cls.get("categories") or [])]
        if not rows:
            line = Line(study)
            line.lit("\"").opt("", (*base, "title")).lit("\": no measurements are posted")
            line.opt(" (reporting status ", (*base, "reportingStatus"), ")", enum=True)
            out.append(line.lit(".").sentence())
        for c, cls in enumerate(measure.get("classes") or []):
            if cls.get("denoms"):
                out.extend(denominators(study, (*base, "classes", c), (*base, "groups"),
                                        ((*base, "title"), (*base, "classes", c, "title"))))
        for c, k in rows:
            out.append(_row(study, base, c, k, groups))
    return out


def _row(study: dict[str, Any], base: Path, c: int, k: int, groups: dict[Any, int]) -> Sentence:
    line = Line(study)
    measure = line.get(base) or {}
    cls, cat = (*base, "classes", c), (*base, "classes", c, "categories", k)
    category = line.get(cat)
    line.lit("\"").at(measure, base, "title").lit("\"")
    if measure.get("type") not in ("PRIMARY", "SECONDARY", None):
        line.lit(" (").val((*base, "type"), labels=OUTCOME_TYPE_LABELS).lit(" outcome)")
    line.at(line.get(cls), cls, "title", " (", ")").at(category, cat, "title", " [", "]")
    line.at(measure, base, "paramType", ", ", enum=True).at(measure, base, "unitOfMeasure", " in ")
    line.at(measure, base, "timeFrame", " at ").lit(": ")
    measurements(line, (category, cat), (measure, base), (*base, "groups"), groups)
    return line.lit(".").sentence()


def measurements(line: Line, category: tuple[Any, Path], measure: tuple[Any, Path],
                 group_list: Path, groups: dict[Any, int]) -> None:
    """Every group's value of one category (the object and its path) of a measure (the
    object and its path: it holds the dispersion type): ``title value (dispersion spread)``
    or ``title value (dispersion lower to upper)``, with the measurement's comment; groups
    titled from ``group_list``."""
    node, cat = category
    items = node.get("measurements") if isinstance(node, dict) else None
    for m, cell in enumerate(items or []):
        if not isinstance(cell, dict):
            continue
        at = (*cat, "measurements", m)
        gid = cell.get("groupId")
        line.lit("; " if m else "")
        if gid in groups:
            line.group((*group_list, groups[gid]), " ")
        line.at(cell, at, "value")
        if filled(cell.get("spread")):
            line.lit(" (").at(*measure, "dispersionType", after=" ", enum=True)
            line.at(cell, at, "spread").lit(")")
        elif filled(cell.get("lowerLimit")) or filled(cell.get("upperLimit")):
            line.lit(" (").at(*measure, "dispersionType", after=" ", enum=True)
            line.at(cell, at, "lowerLimit").lit(" to ").at(cell, at, "upperLimit").lit(")")
        line.at(cell, at, "comment", " [", "]")


def _has_results(study: dict[str, Any]) -> bool:
    return bool(Line(study).get(MEASURES))


def primary_analysis(study: dict[str, Any]) -> list[Sentence]:
    if not _has_results(study):
        return not_given("The registry record posts no results for the primary outcome.")
    return (_methods(study, _measures(study, True))
            or not_given("The registry record posts no analysis for the primary outcome."))


def primary_results(study: dict[str, Any]) -> list[Sentence]:
    if not _has_results(study):
        return not_given("The registry record posts no results for the primary outcome.")
    return (_results(study, _measures(study, True))
            or not_given("The registry record posts no results for the primary outcome."))


def secondary_methods(study: dict[str, Any]) -> list[Sentence]:
    if not _has_results(study):
        return not_given("The registry record posts no results for the secondary outcomes.")
    return (_methods(study, _measures(study, False))
            or not_given("The registry record posts no results for the secondary outcomes."))


def secondary_results(study: dict[str, Any]) -> list[Sentence]:
    if not _has_results(study):
        return not_given("The registry record posts no results for the secondary outcomes.")
    return (_results(study, _measures(study, False))
            or not_given("The registry record posts no results for the secondary outcomes."))
