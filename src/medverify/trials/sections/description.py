"""The sections that say what the trial is: ``definition`` (titles, sponsor, status,
summary), ``condition`` (conditions, keywords, MeSH terms) and ``design``."""

from __future__ import annotations

from typing import Any

from medverify.trials.summary import (
    DESIGN,
    IDENT,
    MAX_LIST,
    STATUS,
    Line,
    P,
    Sentence,
    not_given,
)


def definition(study: dict[str, Any]) -> list[Sentence]:
    out = []
    line = Line(study)
    if line.has((*IDENT, "briefTitle")):
        line.lit("Trial ").val((*IDENT, "nctId")).lit(" is titled \"").val((*IDENT, "briefTitle"))
        line.lit("\"").opt(" (acronym ", (*IDENT, "acronym"), ")").lit(".")
        out.append(line.sentence())
    line = Line(study)
    if line.has((*IDENT, "officialTitle")):
        out.append(line.lit("Its official title is \"").val((*IDENT, "officialTitle"))
                   .lit("\".").sentence())
    line = Line(study)
    sponsor = (*P, "sponsorCollaboratorsModule", "leadSponsor", "name")
    if line.has(sponsor) or line.has((*IDENT, "organization", "fullName")):
        line.lit("It is sponsored by ")
        line.val(sponsor if line.has(sponsor) else (*IDENT, "organization", "fullName"))
        out.append(line.lit(".").sentence())
    line = Line(study)
    if line.has((*STATUS, "overallStatus")):
        line.lit("Its overall status is ").val((*STATUS, "overallStatus"), enum=True)
        line.opt("; it started ", (*STATUS, "startDateStruct", "date"))
        line.opt(" and completed ", (*STATUS, "completionDateStruct", "date"))
        out.append(line.lit(".").sentence())
    line = Line(study)
    summary = (*P, "descriptionModule", "briefSummary")
    if line.has(summary):
        out.append(line.lit("Summary: ").val(summary).sentence())
    return out or not_given("The registry record gives no title or summary for this trial.")


def condition(study: dict[str, Any]) -> list[Sentence]:
    out = []
    cond = (*P, "conditionsModule")
    line = Line(study)
    if line.has((*cond, "conditions")):
        out.append(line.lit("Conditions studied: ").values((*cond, "conditions")).lit(".")
                   .sentence())
    line = Line(study)
    if line.has((*cond, "keywords")):
        out.append(line.lit("Keywords: ").values((*cond, "keywords")).lit(".").sentence())
    meshes = ("derivedSection", "conditionBrowseModule", "meshes")
    line = Line(study)
    terms = line.get(meshes) or []
    if terms:
        line.lit("MeSH condition terms: ")
        for i in range(min(len(terms), MAX_LIST)):
            line.lit(", " if i else "").val((*meshes, i, "term")).lit(" (").val((*meshes, i, "id"))
            line.lit(")")
        out.append(line.lit(".").sentence())
    return out or not_given("The registry record names no condition for this trial.")


def design(study: dict[str, Any]) -> list[Sentence]:
    out = []
    info = (*DESIGN, "designInfo")
    line = Line(study)
    if line.has((*DESIGN, "studyType")):
        line.lit("This is an ").val((*DESIGN, "studyType"), enum=True).lit(" study")
        if line.has((*DESIGN, "phases")):
            line.lit(" (phase: ").values((*DESIGN, "phases"), enum=True).lit(")")
        out.append(line.lit(".").sentence())
    line = Line(study)
    fields = (("allocation", "allocation"), ("intervention model", "interventionModel"),
              ("primary purpose", "primaryPurpose"), ("observational model", "observationalModel"),
              ("time perspective", "timePerspective"))
    filled = [(label, key) for label, key in fields if line.has((*info, key))]
    for i, (label, key) in enumerate(filled):
        line.lit("; " if i else "Design: ").lit(f"{label} ").val((*info, key), enum=True)
    if filled:
        out.append(line.lit(".").sentence())
    line = Line(study)
    masking = (*info, "maskingInfo")
    if line.has((*masking, "masking")):
        line.lit("Masking: ").val((*masking, "masking"), enum=True)
        if line.has((*masking, "whoMasked")):
            line.lit(" (").values((*masking, "whoMasked"), enum=True).lit(")")
        out.append(line.lit(".").sentence())
    line = Line(study)
    if line.has((*DESIGN, "enrollmentInfo", "count")):
        line.lit("Enrollment: ").val((*DESIGN, "enrollmentInfo", "count")).lit(" participants")
        line.opt(" (", (*DESIGN, "enrollmentInfo", "type"), ")", enum=True)
        out.append(line.lit(".").sentence())
    return out or not_given("The registry record gives no design for this trial.")
