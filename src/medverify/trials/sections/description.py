"""The sections that say what the trial is: ``definition`` (titles, sponsor, status and
dates, summary), ``condition`` (conditions, keywords, MeSH terms) and ``design``.

Dates are written as the registry types them (``startDateStruct``,
``primaryCompletionDateStruct``, ``completionDateStruct``; ``type`` ACTUAL, ESTIMATED or, in
older records, ANTICIPATED): only an actual date is written as something that happened
("it started on"), and only when the overall status allows it (a withdrawn study enrolled
no one); an estimated or anticipated date says so ("is expected to start on ... (estimated
date)", "is given as ..., an estimated date"); a date without a type says the record does
not tell.
"""

from __future__ import annotations

from typing import Any

from medverify.trials.summary import (
    DESIGN,
    IDENT,
    MAX_LIST,
    PHASE_LABELS,
    STATUS,
    Line,
    P,
    Path,
    Sentence,
    left_out,
    not_given,
)

DATES: tuple[tuple[str, str], ...] = (
    ("startDateStruct", "start"),
    ("primaryCompletionDateStruct", "primary completion"),
    ("completionDateStruct", "completion"),
)
"""The statusModule date fields and what each dates."""

ESTIMATE_TYPES = frozenset({"ESTIMATED", "ANTICIPATED"})
# Statuses of a study still under way: an estimated date in its future is "expected".
ONGOING = frozenset({"NOT_YET_RECRUITING", "RECRUITING", "ENROLLING_BY_INVITATION",
                     "ACTIVE_NOT_RECRUITING"})
# What an actual date is written as, per field; (status, field) pairs where the overall
# status contradicts that wording fall back to "is given as ..., an actual date".
_ACTUAL = {"start": "It started on ", "primary completion": "It reached primary completion on ",
           "completion": "It ended on ", "completed": "It was completed on "}
_EXPECTED = {"start": "It is expected to start on ",
             "primary completion": "It is expected to reach primary completion on ",
             "completion": "It is expected to be completed on "}


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
    out.extend(status_sentences(study))
    line = Line(study)
    summary = (*P, "descriptionModule", "briefSummary")
    if line.has(summary):
        out.append(line.lit("Summary: ").val(summary).sentence())
    return out or not_given("The registry record gives no title or summary for this trial.")


def status_sentences(study: dict[str, Any]) -> list[Sentence]:
    """The overall status (why it stopped, the last known status, when it was verified),
    then one sentence per date."""
    out = []
    line = Line(study)
    if line.has((*STATUS, "overallStatus")):
        line.lit("Its overall status is ").val((*STATUS, "overallStatus"), enum=True)
        line.opt(" (why stopped: ", (*STATUS, "whyStopped"), ")")
        line.opt("; its last known status was ", (*STATUS, "lastKnownStatus"), enum=True)
        line.opt("; the status was last verified in ", (*STATUS, "statusVerifiedDate"))
        out.append(line.lit(".").sentence())
    status = Line(study).get((*STATUS, "overallStatus"))
    for key, what in DATES:
        sentence = date_sentence(study, (*STATUS, key), what, status)
        if sentence is not None:
            out.append(sentence)
    return out


def date_sentence(study: dict[str, Any], base: Path, what: str,
                  status: Any) -> Sentence | None:
    """One date as the registry types it (see the module docstring)."""
    line = Line(study)
    date, kind = (*base, "date"), line.get((*base, "type"))
    if not line.has(date):
        return None
    if kind == "ACTUAL" and _actual_fits(what, status):
        wording = "completed" if what == "completion" and status == "COMPLETED" else what
        line.lit(_ACTUAL[wording]).val(date).lit(" (").val((*base, "type"), enum=True)
        return line.lit(" date).").sentence()
    if kind in ESTIMATE_TYPES and ((status in ONGOING and what != "start")
                                   or status == "NOT_YET_RECRUITING"):
        line.lit(_EXPECTED[what]).val(date).lit(" (").val((*base, "type"), enum=True)
        return line.lit(" date).").sentence()
    line.lit(f"Its {what} date is given as ").val(date)
    if kind == "ACTUAL" or kind in ESTIMATE_TYPES:
        line.lit(", an ").val((*base, "type"), enum=True).lit(" date")
    else:
        line.lit(" (the record does not say whether this date is actual or estimated)")
    return line.lit(".").sentence()


def _actual_fits(what: str, status: Any) -> bool:
    """Whether the status agrees with writing an actual date as past: a withdrawn study
    never started, a study not yet recruiting has not, a study under way has not ended."""
    if status in ("WITHDRAWN", "NOT_YET_RECRUITING"):
        return False
    return not (what == "completion" and status in ONGOING)


def condition(study: dict[str, Any]) -> list[Sentence]:
    out = []
    cond = (*P, "conditionsModule")
    line = Line(study)
    if line.has((*cond, "conditions")):
        out += line.lit("Conditions studied: ").values((*cond, "conditions"), "conditions") \
            .lit(".").sentences()
    line = Line(study)
    if line.has((*cond, "keywords")):
        out += line.lit("Keywords: ").values((*cond, "keywords"), "keywords").lit(".") \
            .sentences()
    meshes = ("derivedSection", "conditionBrowseModule", "meshes")
    line = Line(study)
    terms = line.get(meshes) or []
    if terms:
        line.lit("MeSH condition terms: ")
        shown = range(min(len(terms), MAX_LIST))
        for i in shown:
            line.lit(", " if i else "").val((*meshes, i, "term")).opt(" (", (*meshes, i, "id"),
                                                                      ")")
        out.append(line.lit(".").sentence())
        note = left_out(study, meshes, shown, "MeSH condition terms", ("term",))
        out += [note] if note is not None else []
    return out or not_given("The registry record names no condition for this trial.")


def design(study: dict[str, Any]) -> list[Sentence]:
    out = []
    info = (*DESIGN, "designInfo")
    line = Line(study)
    if line.has((*DESIGN, "studyType")):
        line.lit("This is an ").val((*DESIGN, "studyType"), enum=True).lit(" study")
        if line.has((*DESIGN, "phases")):
            line.lit(" (phase: ").values((*DESIGN, "phases"), "phases", labels=PHASE_LABELS)
            line.lit(")")
        out += line.lit(".").sentences()
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
            line.lit(" (").values((*masking, "whoMasked"), "masked roles", enum=True).lit(")")
        out += line.lit(".").sentences()
    line = Line(study)
    if line.has((*DESIGN, "enrollmentInfo", "count")):
        line.lit("Enrollment: ").val((*DESIGN, "enrollmentInfo", "count")).lit(" participants")
        line.opt(" (", (*DESIGN, "enrollmentInfo", "type"), ")", enum=True)
        out.append(line.lit(".").sentence())
    return out or not_given("The registry record gives no design for this trial.")
