"""The ``baseline characteristics`` section (``resultsSection.baselineCharacteristicsModule``):
the population, the participants analyzed per group, then every measure: its description,
its denominators where they differ from the module's, and one sentence per class and
category with every group's value, as the outcome results are written."""

from __future__ import annotations

from typing import Any

from medverify.trials.sections.results import denominators, measurements
from medverify.trials.summary import (
    BASELINE,
    Line,
    Path,
    Sentence,
    group_index,
    not_given,
)

GROUPS = (*BASELINE, "groups")


def baseline(study: dict[str, Any]) -> list[Sentence]:
    line = Line(study)
    if not line.has(BASELINE):
        return not_given("The registry record posts no baseline characteristics.")
    out = []
    if line.has((*BASELINE, "populationDescription")):
        out.append(line.lit("Baseline population: ").val((*BASELINE, "populationDescription"))
                   .sentence())
    out.extend(denominators(study, BASELINE, GROUPS))
    groups = group_index(Line(study), GROUPS)
    overall = Line(study).get((*BASELINE, "denoms"))
    for j, measure in enumerate(Line(study).get((*BASELINE, "measures")) or []):
        if isinstance(measure, dict):
            out.extend(_measure(study, (*BASELINE, "measures", j), measure, groups, overall))
    return out or not_given("The registry record posts no baseline characteristics.")


def _measure(study: dict[str, Any], base: Path, measure: dict[str, Any],
             groups: dict[Any, int], overall: Any) -> list[Sentence]:
    out = []
    line = Line(study)
    if line.has((*base, "description")) or line.has((*base, "populationDescription")):
        line.lit("Baseline measure \"").opt("", (*base, "title")).lit("\":")
        line.opt(" ", (*base, "description")).opt(" Analysis population: ",
                                                   (*base, "populationDescription"))
        out.append(line.sentence())
    if measure.get("denoms") and measure.get("denoms") != overall:
        out.extend(denominators(study, base, GROUPS, ((*base, "title"),)))
    classes = measure.get("classes") or []
    for c, cls in enumerate(classes):
        if not isinstance(cls, dict):
            continue
        if cls.get("denoms") and cls.get("denoms") != overall:
            out.extend(denominators(study, (*base, "classes", c), GROUPS,
                                    ((*base, "title"), (*base, "classes", c, "title"))))
        for k in range(len(cls.get("categories") or [])):
            out.append(_row(study, base, c, k, groups))
    if not classes:
        line = Line(study)
        out.append(line.lit("\"").opt("", (*base, "title"))
                   .lit("\": no baseline measurements are posted.").sentence())
    return out


def _row(study: dict[str, Any], base: Path, c: int, k: int, groups: dict[Any, int]) -> Sentence:
    line = Line(study)
    measure = line.get(base) or {}
    cls, cat = (*base, "classes", c), (*base, "classes", c, "categories", k)
    category = line.get(cat)
    line.lit("Baseline \"").at(measure, base, "title").lit("\"")
    line.at(line.get(cls), cls, "title", " (", ")").at(category, cat, "title", " [", "]")
    line.at(measure, base, "paramType", ", ", enum=True).at(measure, base, "unitOfMeasure", " in ")
    line.lit(": ")
    measurements(line, (category, cat), (measure, base), GROUPS, groups)
    return line.lit(".").sentence()
