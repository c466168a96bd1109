"""The ``interventions`` and ``arms`` sections (the arms with the participant flow of the
first period)."""

from __future__ import annotations

from typing import Any

from medverify.trials.summary import (
    ARMS,
    FLOW,
    MAX_LIST,
    Line,
    Sentence,
    not_given,
)


def interventions(study: dict[str, Any]) -> list[Sentence]:
    out = []
    items = Line(study).get((*ARMS, "interventions")) or []
    for i in range(min(len(items), MAX_LIST)):
        base = (*ARMS, "interventions", i)
        line = Line(study)
        line.lit("Intervention: ").val((*base, "name"))
        line.opt(" (", (*base, "type"), ")", enum=True)
        if line.has((*base, "otherNames")):
            line.lit("; also called ").values((*base, "otherNames"))
        line.lit(".").opt(" ", (*base, "description"))
        out.append(line.sentence())
    if len(items) > MAX_LIST:
        out.append(Sentence(text="Further interventions are listed in the registry record.",
                            pointers=[]))
    return out or not_given("The registry record lists no interventions for this trial.")


def arms(study: dict[str, Any]) -> list[Sentence]:
    out = []
    groups = Line(study).get((*ARMS, "armGroups")) or []
    for i in range(min(len(groups), MAX_LIST)):
        base = (*ARMS, "armGroups", i)
        line = Line(study)
        line.lit("Arm \"").val((*base, "label")).lit("\"")
        line.opt(" (", (*base, "type"), ")", enum=True)
        if line.has((*base, "interventionNames")):
            line.lit(" receives ").values((*base, "interventionNames"))
        line.lit(".").opt(" ", (*base, "description"))
        out.append(line.sentence())
    if len(groups) > MAX_LIST:
        out.append(Sentence(text="Further arms are listed in the registry record.", pointers=[]))
    out.extend(_flow(study))
    return out or not_given("The registry record lists no arms or groups for this trial.")


def _flow(study: dict[str, Any]) -> list[Sentence]:
    """Participant flow of the first period: STARTED and COMPLETED per group."""
    out = []
    line = Line(study)
    groups = {g.get("id"): i for i, g in enumerate(line.get((*FLOW, "groups")) or [])}
    milestones = line.get((*FLOW, "periods", 0, "milestones")) or []
    for m, milestone in enumerate(milestones):
        if milestone.get("type") not in ("STARTED", "COMPLETED"):
            continue
        base = (*FLOW, "periods", 0, "milestones", m)
        line = Line(study)
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
