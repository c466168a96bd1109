"""The ``interventions`` and ``arms`` sections (the arms with the participant flow: every
milestone of every period, per group)."""

from __future__ import annotations

from typing import Any

from medverify.trials.summary import (
    ARMS,
    FLOW,
    Line,
    Sentence,
    group_index,
    not_given,
)


def interventions(study: dict[str, Any]) -> list[Sentence]:
    out = []
    items = Line(study).get((*ARMS, "interventions")) or []
    for i in range(len(items)):
        base = (*ARMS, "interventions", i)
        line = Line(study)
        line.lit("Intervention: ").val((*base, "name"))
        line.opt(" (", (*base, "type"), ")", enum=True)
        if line.has((*base, "otherNames")):
            line.lit("; also called ").values((*base, "otherNames"),
                                              "other names of this intervention")
        line.lit(".").opt(" ", (*base, "description"))
        out += line.sentences()
    return out or not_given("The registry record lists no interventions for this trial.")


def arms(study: dict[str, Any]) -> list[Sentence]:
    out = []
    groups = Line(study).get((*ARMS, "armGroups")) or []
    for i in range(len(groups)):
        base = (*ARMS, "armGroups", i)
        line = Line(study)
        line.lit("Arm \"").val((*base, "label")).lit("\"")
        line.opt(" (", (*base, "type"), ")", enum=True)
        if line.has((*base, "interventionNames")):
            line.lit(" receives ").values((*base, "interventionNames"),
                                          "interventions of this arm")
        line.lit(".").opt(" ", (*base, "description"))
        out += line.sentences()
    out.extend(_flow(study))
    return out or not_given("The registry record lists no arms or groups for this trial.")


def _flow(study: dict[str, Any]) -> list[Sentence]:
    """Participant flow: each milestone of each period (STARTED, COMPLETED, NOT COMPLETED
    and any the record names), per group."""
    out = []
    line = Line(study)
    groups = group_index(line, (*FLOW, "groups"))
    for p, period in enumerate(line.get((*FLOW, "periods")) or []):
        milestones = period.get("milestones") if isinstance(period, dict) else None
        for m, milestone in enumerate(milestones or []):
            base = (*FLOW, "periods", p, "milestones", m)
            line = Line(study)
            line.lit("Participant flow").opt(" (", (*FLOW, "periods", p, "title"), ")")
            line.opt(", ", (*base, "type"), enum=True).lit(": ")
            achievements = milestone.get("achievements") or []
            for a in range(len(achievements)):
                gid = achievements[a].get("groupId")
                line.lit("; " if a else "")
                if gid in groups:
                    line.group((*FLOW, "groups", groups[gid]), " ")
                line.opt("", (*base, "achievements", a, "numSubjects"))
            out.append(line.lit(".").sentence())
    return out
