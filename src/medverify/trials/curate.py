"""Deterministic curation of a ClinicalTrials.gov (API v2) study record into CHECK's
15-section structured summary, and its knowledge-base passages.

Every sentence is a plain template filled from named registry fields. Text values are
copied with their whitespace collapsed; numbers (counts, percentages, p-values, limits,
units, time frames, group titles) are copied exactly as the registry writes them, never
parsed, rounded or recomputed; registry enum codes (``PHASE2``, ``PLACEBO_COMPARATOR``)
are written in lower case with spaces (``phase2``, ``placebo comparator``). Each
sentence carries the JSON pointers of the fields it used. A section the record cannot
fill says so in one sentence with no pointers. Long lists are capped (see the ``MAX_*``
constants) so a summary stays readable; a capped list says that more are in the record,
without a count. See ``docs/trials.md``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from medverify.records import Document

SECTIONS: tuple[str, ...] = (
    "definition",
    "condition",
    "design",
    "interventions",
    "arms",
    "eligibility",
    "primary outcome",
    "primary outcome statistical analysis",
    "primary outcome results",
    "secondary outcomes",
    "secondary outcome methods",
    "secondary outcome key results",
    "serious adverse events",
    "non-serious adverse events",
    "safety overview",
)
"""The 15 sections, in order (the paper's 15 question categories)."""

MAX_LIST = 10  # conditions, keywords, MeSH terms, other names, arm/intervention names
MAX_OUTCOMES = 10  # registered secondary outcomes; result measures per section
MAX_ROWS = 8  # classes x categories of one outcome measure
MAX_ANALYSES = 3  # statistical analyses per outcome measure
MAX_EVENTS = 10  # adverse-event terms per section, the most frequent first

STUDY_URL = "https://clinicaltrials.gov/study/{}"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Sentence(_Model):
    """One templated sentence and the JSON pointers of the registry fields it copies."""

    text: str
    pointers: list[str]


class Section(_Model):
    name: str
    sentences: list[Sentence]


class TrialSummary(_Model):
    nct_id: str
    title: str
    sections: list[Section]
    problems: list[str] = []  # e.g. a result row naming a group the record does not list

    def section(self, name: str) -> Section:
        for section in self.sections:
            if section.name == name:
                return section
        raise KeyError(name)


Path = tuple[str | int, ...]
_MISSING = object()


def pointer(path: Path) -> str:
    """The JSON pointer (RFC 6901) of a path of keys and indexes."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def resolve(study: dict[str, Any], ref: str) -> Any:
    """The value a pointer names; KeyError when it names nothing."""
    node: Any = study
    for raw in ref.split("/")[1:]:
        key = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise KeyError(ref)
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            raise KeyError(ref)
    return node


def enum_text(code: str) -> str:
    """How a registry enum code is written: ``PLACEBO_COMPARATOR`` -> ``placebo comparator``."""
    return code.replace("_", " ").lower()


def text_of(value: Any) -> str:
    """How a scalar registry value is written: strings with collapsed whitespace, numbers
    as the JSON holds them."""
    if isinstance(value, str):
        return " ".join(value.split())
    return str(value)


class _Line:
    """Builds one sentence: literal text and registry fields, recording each field's pointer."""

    def __init__(self, study: dict[str, Any]) -> None:
        self.study = study
        self.parts: list[str] = []
        self.pointers: list[str] = []

    def get(self, path: Path) -> Any:
        node: Any = self.study
        for key in path:
            if isinstance(key, int):
                node = node[key] if isinstance(node, list) and key < len(node) else _MISSING
            else:
                node = node.get(key, _MISSING) if isinstance(node, dict) else _MISSING
            if node is _MISSING:
                return None
        return node

    def has(self, path: Path) -> bool:
        value = self.get(path)
        return value is not None and value != "" and value != []

    def lit(self, text: str) -> _Line:
        self.parts.append(text)
        return self

    def val(self, path: Path, enum: bool = False) -> _Line:
        value = self.get(path)
        text = text_of(value)
        self.parts.append(enum_text(text) if enum else text)
        self.pointers.append(pointer(path))
        return self

    def opt(self, before: str, path: Path, after: str = "", enum: bool = False) -> _Line:
        """``before value after`` when the field is filled, nothing otherwise."""
        if self.has(path):
            self.lit(before).val(path, enum).lit(after)
        return self

    def values(self, path: Path, limit: int = MAX_LIST, enum: bool = False,
               sep: str = ", ") -> _Line:
        """A list field's items, joined; capped at ``limit`` with a note."""
        items = self.get(path) or []
        for i in range(min(len(items), limit)):
            if i:
                self.lit(sep)
            self.val((*path, i), enum)
        if len(items) > limit:
            self.lit(" and others listed in the record")
        return self

    def sentence(self) -> Sentence:
        return Sentence(text="".join(self.parts).strip(), pointers=list(self.pointers))


def _missing(text: str) -> list[Sentence]:
    return [Sentence(text=text, pointers=[])]


P = ("protocolSection",)
R = ("resultsSection",)
IDENT = (*P, "identificationModule")
STATUS = (*P, "statusModule")
DESIGN = (*P, "designModule")
ARMS = (*P, "armsInterventionsModule")
ELIG = (*P, "eligibilityModule")
OUTCOMES = (*P, "outcomesModule")
FLOW = (*R, "participantFlowModule")
MEASURES = (*R, "outcomeMeasuresModule", "outcomeMeasures")
AE = (*R, "adverseEventsModule")


def curate(study: dict[str, Any]) -> TrialSummary:
    """The 15-section summary of one API v2 study record (see :data:`SECTIONS`)."""
    line = _Line(study)
    nct_id = text_of(line.get((*IDENT, "nctId")) or "")
    title = text_of(line.get((*IDENT, "briefTitle")) or line.get((*IDENT, "officialTitle")) or "")
    builders = (
        _definition, _condition, _design, _interventions, _arms, _eligibility,
        _primary_outcome, _primary_analysis, _primary_results, _secondary_outcomes,
        _secondary_methods, _secondary_results, _serious_events, _other_events, _safety,
    )
    sections = [Section(name=name, sentences=build(study))
                for name, build in zip(SECTIONS, builders, strict=True)]
    return TrialSummary(nct_id=nct_id, title=title, sections=sections,
                        problems=group_problems(study))


def group_problems(study: dict[str, Any]) -> list[str]:
    """Result rows that name a group their module does not list (the registry's group ids
    are per module: ``FG``/``OG``/``EG``). Such a row is still written, without a group
    title; each one is reported here, never a crash."""
    line = _Line(study)
    problems: list[str] = []

    def check(where: str, known: set[Any], refs: list[Any]) -> None:
        bad = sorted({str(r) for r in refs if r is not None and r not in known})
        if bad:
            problems.append(f"{where}: group id(s) {', '.join(bad[:5])} not among the "
                            f"{len(known)} groups listed")

    flow = {g.get("id") for g in line.get((*FLOW, "groups")) or [] if isinstance(g, dict)}
    for p, period in enumerate(line.get((*FLOW, "periods")) or []):
        if not isinstance(period, dict):
            continue
        refs = [a.get("groupId") for m in period.get("milestones") or [] if isinstance(m, dict)
                for a in m.get("achievements") or [] if isinstance(a, dict)]
        refs += [r.get("groupId") for w in period.get("dropWithdraws") or []
                 if isinstance(w, dict) for r in w.get("reasons") or [] if isinstance(r, dict)]
        check(f"participant flow period {p}", flow, refs)
    for m, measure in enumerate(line.get(MEASURES) or []):
        if not isinstance(measure, dict):
            continue
        known = {g.get("id") for g in measure.get("groups") or [] if isinstance(g, dict)}
        refs = [c.get("groupId") for d in measure.get("denoms") or [] if isinstance(d, dict)
                for c in d.get("counts") or [] if isinstance(c, dict)]
        refs += [x.get("groupId") for k in measure.get("classes") or [] if isinstance(k, dict)
                 for c in k.get("categories") or [] if isinstance(c, dict)
                 for x in c.get("measurements") or [] if isinstance(x, dict)]
        refs += [g for a in measure.get("analyses") or [] if isinstance(a, dict)
                 for g in a.get("groupIds") or []]
        check(f"outcome measure {m}", known, refs)
    events = {g.get("id") for g in line.get((*AE, "eventGroups")) or [] if isinstance(g, dict)}
    for key in ("seriousEvents", "otherEvents"):
        refs = [st.get("groupId") for e in line.get((*AE, key)) or [] if isinstance(e, dict)
                for st in e.get("stats") or [] if isinstance(st, dict)]
        check(f"adverse events ({key})", events, refs)
    return problems


# --- protocol sections ---------------------------------------------------------------


def _definition(study: dict[str, Any]) -> list[Sentence]:
    out = []
    line = _Line(study)
    if line.has((*IDENT, "briefTitle")):
        line.lit("Trial ").val((*IDENT, "nctId")).lit(" is titled \"").val((*IDENT, "briefTitle"))
        line.lit("\"").opt(" (acronym ", (*IDENT, "acronym"), ")").lit(".")
        out.append(line.sentence())
    line = _Line(study)
    if line.has((*IDENT, "officialTitle")):
        out.append(line.lit("Its official title is \"").val((*IDENT, "officialTitle"))
                   .lit("\".").sentence())
    line = _Line(study)
    sponsor = (*P, "sponsorCollaboratorsModule", "leadSponsor", "name")
    if line.has(sponsor) or line.has((*IDENT, "organization", "fullName")):
        line.lit("It is sponsored by ")
        line.val(sponsor if line.has(sponsor) else (*IDENT, "organization", "fullName"))
        out.append(line.lit(".").sentence())
    line = _Line(study)
    if line.has((*STATUS, "overallStatus")):
        line.lit("Its overall status is ").val((*STATUS, "overallStatus"), enum=True)
        line.opt("; it started ", (*STATUS, "startDateStruct", "date"))
        line.opt(" and completed ", (*STATUS, "completionDateStruct", "date"))
        out.append(line.lit(".").sentence())
    line = _Line(study)
    summary = (*P, "descriptionModule", "briefSummary")
    if line.has(summary):
        out.append(line.lit("Summary: ").val(summary).sentence())
    return out or _missing("The registry record gives no title or summary for this trial.")


def _condition(study: dict[str, Any]) -> list[Sentence]:
    out = []
    cond = (*P, "conditionsModule")
    line = _Line(study)
    if line.has((*cond, "conditions")):
        out.append(line.lit("Conditions studied: ").values((*cond, "conditions")).lit(".")
                   .sentence())
    line = _Line(study)
    if line.has((*cond, "keywords")):
        out.append(line.lit("Keywords: ").values((*cond, "keywords")).lit(".").sentence())
    meshes = ("derivedSection", "conditionBrowseModule", "meshes")
    line = _Line(study)
    terms = line.get(meshes) or []
    if terms:
        line.lit("MeSH condition terms: ")
        for i in range(min(len(terms), MAX_LIST)):
            line.lit(", " if i else "").val((*meshes, i, "term")).lit(" (").val((*meshes, i, "id"))
            line.lit(")")
        out.append(line.lit(".").sentence())
    return out or _missing("The registry record names no condition for this trial.")


def _design(study: dict[str, Any]) -> list[Sentence]:
    out = []
    info = (*DESIGN, "designInfo")
    line = _Line(study)
    if line.has((*DESIGN, "studyType")):
        line.lit("This is an ").val((*DESIGN, "studyType"), enum=True).lit(" study")
        if line.has((*DESIGN, "phases")):
            line.lit(" (phase: ").values((*DESIGN, "phases"), enum=True).lit(")")
        out.append(line.lit(".").sentence())
    line = _Line(study)
    fields = (("allocation", "allocation"), ("intervention model", "interventionModel"),
              ("primary purpose", "primaryPurpose"), ("observational model", "observationalModel"),
              ("time perspective", "timePerspective"))
    filled = [(label, key) for label, key in fields if line.has((*info, key))]
    for i, (label, key) in enumerate(filled):
        line.lit("; " if i else "Design: ").lit(f"{label} ").val((*info, key), enum=True)
    if filled:
        out.append(line.lit(".").sentence())
    line = _Line(study)
    masking = (*info, "maskingInfo")
    if line.has((*masking, "masking")):
        line.lit("Masking: ").val((*masking, "masking"), enum=True)
        if line.has((*masking, "whoMasked")):
            line.lit(" (").values((*masking, "whoMasked"), enum=True).lit(")")
        out.append(line.lit(".").sentence())
    line = _Line(study)
    if line.has((*DESIGN, "enrollmentInfo", "count")):
        line.lit("Enrollment: ").val((*DESIGN, "enrollmentInfo", "count")).lit(" participants")
        line.opt(" (", (*DESIGN, "enrollmentInfo", "type"), ")", enum=True)
        out.append(line.lit(".").sentence())
    return out or _missing("The registry record gives no design for this trial.")


def _interventions(study: dict[str, Any]) -> list[Sentence]:
    out = []
    items = _Line(study).get((*ARMS, "interventions")) or []
    for i in range(min(len(items), MAX_LIST)):
        base = (*ARMS, "interventions", i)
        line = _Line(study)
        line.lit("Intervention: ").val((*base, "name"))
        line.opt(" (", (*base, "type"), ")", enum=True)
        if line.has((*base, "otherNames")):
            line.lit("; also called ").values((*base, "otherNames"))
        line.lit(".").opt(" ", (*base, "description"))
        out.append(line.sentence())
    if len(items) > MAX_LIST:
        out.append(Sentence(text="Further interventions are listed in the registry record.",
                            pointers=[]))
    return out or _missing("The registry record lists no interventions for this trial.")


def _arms(study: dict[str, Any]) -> list[Sentence]:
    out = []
    groups = _Line(study).get((*ARMS, "armGroups")) or []
    for i in range(min(len(groups), MAX_LIST)):
        base = (*ARMS, "armGroups", i)
        line = _Line(study)
        line.lit("Arm \"").val((*base, "label")).lit("\"")
        line.opt(" (", (*base, "type"), ")", enum=True)
        if line.has((*base, "interventionNames")):
            line.lit(" receives ").values((*base, "interventionNames"))
        line.lit(".").opt(" ", (*base, "description"))
        out.append(line.sentence())
    if len(groups) > MAX_LIST:
        out.append(Sentence(text="Further arms are listed in the registry record.", pointers=[]))
    out.extend(_flow(study))
    return out or _missing("The registry record lists no arms or groups for this trial.")


def _flow(study: dict[str, Any]) -> list[Sentence]:
    """Participant flow of the first period: STARTED and COMPLETED per group."""
    out = []
    line = _Line(study)
    groups = {g.get("id"): i for i, g in enumerate(line.get((*FLOW, "groups")) or [])}
    milestones = line.get((*FLOW, "periods", 0, "milestones")) or []
    for m, milestone in enumerate(milestones):
        if milestone.get("type") not in ("STARTED", "COMPLETED"):
            continue
        base = (*FLOW, "periods", 0, "milestones", m)
        line = _Line(study)
        line.lit("Participant flow (").val((*FLOW, "periods", 0, "title")).lit("), ")
        line.val((*base, "type"), enum=True).lit(": ")
        achievements = milestone.get("achievements") or []
        for a in range(min(len(achievements), MAX_LIST)):
            gid = achievements[a].get("groupId")
            line.lit("; " if a else "")
            if gid in groups:
                line.val((*FLOW, "groups", groups[gid], "title")).lit(" ")
            line.val((*base, "achievements", a, "numSubjects"))
        out.append(line.lit(".").sentence())
    return out


def _eligibility(study: dict[str, Any]) -> list[Sentence]:
    out = []
    line = _Line(study)
    if line.has((*ELIG, "sex")) or line.has((*ELIG, "minimumAge")):
        line.lit("Eligible participants:")
        line.opt(" sex ", (*ELIG, "sex"), ";", enum=True)
        line.opt(" minimum age ", (*ELIG, "minimumAge"), ";")
        line.opt(" maximum age ", (*ELIG, "maximumAge"), ";")
        healthy = line.get((*ELIG, "healthyVolunteers"))
        if isinstance(healthy, bool):
            line.lit(" healthy volunteers accepted;" if healthy
                     else " healthy volunteers not accepted;")
            line.pointers.append(pointer((*ELIG, "healthyVolunteers")))
        line.parts[-1] = line.parts[-1].rstrip(";")
        out.append(line.lit(".").sentence())
    line = _Line(study)
    if line.has((*ELIG, "studyPopulation")):
        out.append(line.lit("Study population: ").val((*ELIG, "studyPopulation")).sentence())
    line = _Line(study)
    if line.has((*ELIG, "eligibilityCriteria")):
        out.append(line.lit("Criteria: ").val((*ELIG, "eligibilityCriteria")).sentence())
    return out or _missing("The registry record gives no eligibility criteria for this trial.")


def _registered(study: dict[str, Any], key: str, limit: int) -> list[Sentence]:
    out = []
    items = _Line(study).get((*OUTCOMES, key)) or []
    for i in range(min(len(items), limit)):
        base = (*OUTCOMES, key, i)
        line = _Line(study)
        line.lit("Outcome: ").val((*base, "measure"))
        line.opt(" (time frame: ", (*base, "timeFrame"), ")").lit(".")
        line.opt(" ", (*base, "description"))
        out.append(line.sentence())
    if len(items) > limit:
        out.append(Sentence(text="Further outcomes are listed in the registry record.",
                            pointers=[]))
    return out


def _primary_outcome(study: dict[str, Any]) -> list[Sentence]:
    return (_registered(study, "primaryOutcomes", MAX_OUTCOMES)
            or _missing("The registry record registers no primary outcome."))


def _secondary_outcomes(study: dict[str, Any]) -> list[Sentence]:
    return (_registered(study, "secondaryOutcomes", MAX_OUTCOMES)
            or _missing("The registry record registers no secondary outcomes."))


# --- results sections ----------------------------------------------------------------


def _measures(study: dict[str, Any], kind: str) -> list[int]:
    """Indexes of the posted outcome measures of one type (PRIMARY, SECONDARY)."""
    items = _Line(study).get(MEASURES) or []
    return [i for i, m in enumerate(items) if m.get("type") == kind][:MAX_OUTCOMES]


def _methods(study: dict[str, Any], indexes: Sequence[int]) -> list[Sentence]:
    out = []
    for i in indexes:
        base = (*MEASURES, i)
        line = _Line(study)
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
    line = _Line(study)
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
    line = _Line(study)
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
        measure = _Line(study).get(base) or {}
        groups = {g.get("id"): g_i for g_i, g in enumerate(measure.get("groups") or [])}
        rows = [(c, k) for c, cls in enumerate(measure.get("classes") or [])
                for k, _ in enumerate(cls.get("categories") or [])]
        if not rows:
            line = _Line(study)
            line.lit("\"").val((*base, "title")).lit("\": no measurements are posted")
            line.opt(" (reporting status ", (*base, "reportingStatus"), ")", enum=True)
            out.append(line.lit(".").sentence())
        for c, k in rows[:MAX_ROWS]:
            out.append(_row(study, base, c, k, groups))
        if len(rows) > MAX_ROWS:
            line = _Line(study)
            out.append(line.lit("Further rows of \"").val((*base, "title"))
                       .lit("\" are listed in the registry record.").sentence())
    return out


def _row(study: dict[str, Any], base: Path, c: int, k: int, groups: dict[Any, int]) -> Sentence:
    line = _Line(study)
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
    return bool(_Line(study).get(MEASURES))


def _primary_analysis(study: dict[str, Any]) -> list[Sentence]:
    if not _has_results(study):
        return _missing("The registry record posts no results for the primary outcome.")
    return (_methods(study, _measures(study, "PRIMARY"))
            or _missing("The registry record posts no analysis for the primary outcome."))


def _primary_results(study: dict[str, Any]) -> list[Sentence]:
    if not _has_results(study):
        return _missing("The registry record posts no results for the primary outcome.")
    return (_results(study, _measures(study, "PRIMARY"))
            or _missing("The registry record posts no results for the primary outcome."))


def _secondary_methods(study: dict[str, Any]) -> list[Sentence]:
    if not _has_results(study):
        return _missing("The registry record posts no results for the secondary outcomes.")
    return (_methods(study, _measures(study, "SECONDARY"))
            or _missing("The registry record posts no results for the secondary outcomes."))


def _secondary_results(study: dict[str, Any]) -> list[Sentence]:
    if not _has_results(study):
        return _missing("The registry record posts no results for the secondary outcomes.")
    return (_results(study, _measures(study, "SECONDARY"))
            or _missing("The registry record posts no results for the secondary outcomes."))


def _events(study: dict[str, Any], key: str, label: str) -> list[Sentence]:
    """The MAX_EVENTS terms affecting the most participants (summed over groups; ties keep
    the record's order), one sentence each with every group's affected / at risk."""
    line = _Line(study)
    groups = {g.get("id"): i for i, g in enumerate(line.get((*AE, "eventGroups")) or [])}
    events = line.get((*AE, key)) or []

    def affected(event: dict[str, Any]) -> int:
        total = 0
        for stat in event.get("stats") or []:
            value = stat.get("numAffected")
            total += value if isinstance(value, int) else 0
        return total

    order = sorted(range(len(events)), key=lambda e: (-affected(events[e]), e))
    out = []
    for e in order[:MAX_EVENTS]:
        base = (*AE, key, e)
        line = _Line(study)
        line.lit(f"{label}: ").val((*base, "term")).opt(" (", (*base, "organSystem"), ")")
        line.lit(", participants affected / at risk: ")
        stats = events[e].get("stats") or []
        for s in range(min(len(stats), MAX_LIST)):
            at = (*base, "stats", s)
            gid = stats[s].get("groupId")
            line.lit("; " if s else "")
            if gid in groups:
                line.val((*AE, "eventGroups", groups[gid], "title")).lit(" ")
            line.opt("", (*at, "numAffected")).lit("/").opt("", (*at, "numAtRisk"))
        out.append(line.lit(".").sentence())
    if len(events) > MAX_EVENTS:
        out.append(Sentence(text=f"Less frequent {label.lower()}s are listed in the registry "
                            "record.", pointers=[]))
    return out


def _group_totals(study: dict[str, Any], label: str, affected: str, at_risk: str) -> Sentence:
    line = _Line(study)
    line.lit(f"{label}, participants affected / at risk: ")
    groups = line.get((*AE, "eventGroups")) or []
    written = 0
    for g in range(min(len(groups), MAX_LIST)):
        base = (*AE, "eventGroups", g)
        if not line.has((*base, affected)):
            continue
        line.lit("; " if written else "").val((*base, "title")).lit(" ").val((*base, affected))
        line.lit("/").opt("", (*base, at_risk))
        written += 1
    return line.lit(".").sentence()


def _ae_missing(study: dict[str, Any], what: str) -> list[Sentence] | None:
    if not _Line(study).has(AE):
        return _missing(f"The registry record posts no {what} results.")
    return None


def _serious_events(study: dict[str, Any]) -> list[Sentence]:
    missing = _ae_missing(study, "serious adverse event")
    if missing:
        return missing
    out = [_group_totals(study, "Serious adverse events", "seriousNumAffected",
                         "seriousNumAtRisk")]
    out.extend(_events(study, "seriousEvents", "Serious adverse event"))
    if not _Line(study).get((*AE, "seriousEvents")):
        out.append(Sentence(text="The registry record lists no serious adverse event terms.",
                            pointers=[]))
    return out


def _other_events(study: dict[str, Any]) -> list[Sentence]:
    missing = _ae_missing(study, "non-serious adverse event")
    if missing:
        return missing
    line = _Line(study)
    line.lit("Non-serious adverse events")
    line.opt(" (reported above a frequency threshold of ", (*AE, "frequencyThreshold"), "%)")
    head = line.sentence()
    totals = _group_totals(study, "", "otherNumAffected", "otherNumAtRisk")
    out = [Sentence(text=head.text + totals.text, pointers=head.pointers + totals.pointers)]
    out.extend(_events(study, "otherEvents", "Non-serious adverse event"))
    if not _Line(study).get((*AE, "otherEvents")):
        out.append(Sentence(text="The registry record lists no non-serious adverse event "
                            "terms.", pointers=[]))
    return out


def _safety(study: dict[str, Any]) -> list[Sentence]:
    missing = _ae_missing(study, "adverse event")
    if missing:
        return missing
    out = [_group_totals(study, "Deaths", "deathsNumAffected", "deathsNumAtRisk")]
    line = _Line(study)
    if line.has((*AE, "timeFrame")):
        out.append(line.lit("Adverse events were collected over: ").val((*AE, "timeFrame"))
                   .sentence())
    line = _Line(study)
    if line.has((*AE, "description")):
        out.append(line.lit("Collection notes: ").val((*AE, "description")).sentence())
    groups = {g.get("id"): i for i, g in enumerate(line.get((*FLOW, "groups")) or [])}
    withdrawals = line.get((*FLOW, "periods", 0, "dropWithdraws")) or []
    for w in range(min(len(withdrawals), MAX_LIST)):
        base = (*FLOW, "periods", 0, "dropWithdraws", w)
        reasons = withdrawals[w].get("reasons") or []
        line = _Line(study)
        line.lit("Participants withdrawn for ").val((*base, "type")).lit(": ")
        for r in range(min(len(reasons), MAX_LIST)):
            gid = reasons[r].get("groupId")
            line.lit("; " if r else "")
            if gid in groups:
                line.val((*FLOW, "groups", groups[gid], "title")).lit(" ")
            line.val((*base, "reasons", r, "numSubjects"))
        out.append(line.lit(".").sentence())
    return out


# --- knowledge-base passages and selection -------------------------------------------


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def study_meta(study: dict[str, Any]) -> dict[str, Any]:
    """Metadata a KB passage of the study carries."""
    line = _Line(study)
    return {
        "nct_id": line.get((*IDENT, "nctId")),
        "phases": list(line.get((*DESIGN, "phases")) or []),
        "conditions": list(line.get((*P, "conditionsModule", "conditions")) or []),
        "interventions": [i.get("name") for i in line.get((*ARMS, "interventions")) or []],
        "overall_status": line.get((*STATUS, "overallStatus")),
        "has_results": bool(study.get("hasResults")),
    }


def summary_documents(summary: TrialSummary, study: dict[str, Any]) -> list[Document]:
    """One knowledge-base document per section: ``<NCT>#<section slug>``."""
    meta = study_meta(study)
    return [
        Document(
            doc_id=f"{summary.nct_id}#{slug(section.name)}",
            title=f"{summary.nct_id} {summary.title}: {section.name}",
            text="\n".join(s.text for s in section.sentences),
            url=STUDY_URL.format(summary.nct_id),
            source="clinicaltrials.gov",
            meta={**meta, "section": section.name},
        )
        for section in summary.sections
    ]


T = TypeVar("T")


def _data(item: Any) -> dict[str, Any]:
    data = getattr(item, "data", item)
    return data if isinstance(data, dict) else {}


def matches(study: dict[str, Any], condition: str | None = None,
            results_posted: bool | None = True) -> bool:
    """Whether a study passes the selection filters (see :func:`select_studies`)."""
    if results_posted is not None and bool(study.get("hasResults")) != results_posted:
        return False
    if condition:
        line = _Line(study)
        cond = (*P, "conditionsModule")
        haystack = [*(line.get((*cond, "conditions")) or []),
                    *(line.get((*cond, "keywords")) or []),
                    line.get((*IDENT, "briefTitle")) or "",
                    line.get((*IDENT, "officialTitle")) or ""]
        needle = condition.lower()
        return any(needle in str(text).lower() for text in haystack)
    return True


def select_studies(studies: Iterable[T], *, condition: str | None = None,
                   results_posted: bool | None = True, n: int | None = None,
                   seed: int = 0) -> list[T]:
    """The studies passing the filters, or a seeded sample of ``n`` of them.

    ``condition``: case-insensitive substring of a condition, keyword or title.
    ``results_posted``: True keeps studies with posted results (as the paper did), False
    those without, None both. Items are study dicts or objects with a ``data`` dict
    (``trials.reader.Study``). Sampling is a reservoir sample (algorithm R with
    ``random.Random(seed)``): one streaming pass holding at most ``n`` items, the same
    sample for the same input order and seed; the sample keeps the input order.
    """
    rng = random.Random(seed)
    reservoir: list[tuple[int, T]] = []
    seen = 0
    for item in studies:
        if not matches(_data(item), condition, results_posted):
            continue
        if n is None or len(reservoir) < n:
            reservoir.append((seen, item))
        else:
            slot = rng.randrange(seen + 1)
            if slot < n:
                reservoir[slot] = (seen, item)
        seen += 1
    return [item for _, item in sorted(reservoir, key=lambda pair: pair[0])]


def iter_summary_documents(studies: Iterable[Any]) -> Iterator[Document]:
    """KB documents of each study (dicts or objects with a ``data`` dict), in order."""
    for item in studies:
        study = _data(item)
        yield from summary_documents(curate(study), study)
