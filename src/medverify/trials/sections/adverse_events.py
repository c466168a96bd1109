"""The adverse-event sections: ``serious adverse events``, ``non-serious adverse events`` and
``safety overview`` (deaths, collection notes, withdrawals)."""

from __future__ import annotations

from typing import Any

from medverify.trials.summary import (
    AE,
    FLOW,
    MAX_EVENTS,
    MAX_LIST,
    Line,
    Sentence,
    not_given,
)


def _events(study: dict[str, Any], key: str, label: str) -> list[Sentence]:
    """The MAX_EVENTS terms affecting the most participants (summed over groups; ties keep
    the record's order), one sentence each with every group's affected / at risk."""
    line = Line(study)
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
        line = Line(study)
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
    line = Line(study)
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
    if not Line(study).has(AE):
        return not_given(f"The registry record posts no {what} results.")
    return None


def serious_events(study: dict[str, Any]) -> list[Sentence]:
    missing = _ae_missing(study, "serious adverse event")
    if missing:
        return missing
    out = [_group_totals(study, "Serious adverse events", "seriousNumAffected",
                         "seriousNumAtRisk")]
    out.extend(_events(study, "seriousEvents", "Serious adverse event"))
    if not Line(study).get((*AE, "seriousEvents")):
        out.append(Sentence(text="The registry record lists no serious adverse event terms.",
                            pointers=[]))
    return out


def other_events(study: dict[str, Any]) -> list[Sentence]:
    missing = _ae_missing(study, "non-serious adverse event")
    if missing:
        return missing
    line = Line(study)
    line.lit("Non-serious adverse events")
    line.opt(" (reported above a frequency threshold of ", (*AE, "frequencyThreshold"), "%)")
    head = line.sentence()
    totals = _group_totals(study, "", "otherNumAffected", "otherNumAtRisk")
    out = [Sentence(text=head.text + totals.text, pointers=head.pointers + totals.pointers)]
    out.extend(_events(study, "otherEvents", "Non-serious adverse event"))
    if not Line(study).get((*AE, "otherEvents")):
        out.append(Sentence(text="The registry record lists no non-serious adverse event "
                            "terms.", pointers=[]))
    return out


def safety(study: dict[str, Any]) -> list[Sentence]:
    missing = _ae_missing(study, "adverse event")
    if missing:
        return missing
    out = [_group_totals(study, "Deaths", "deathsNumAffected", "deathsNumAtRisk")]
    line = Line(study)
    if line.has((*AE, "timeFrame")):
        out.append(line.lit("Adverse events were collected over: ").val((*AE, "timeFrame"))
                   .sentence())
    line = Line(study)
    if line.has((*AE, "description")):
        out.append(line.lit("Collection notes: ").val((*AE, "description")).sentence())
    groups = {g.get("id"): i for i, g in enumerate(line.get((*FLOW, "groups")) or [])}
    withdrawals = line.get((*FLOW, "periods", 0, "dropWithdraws")) or []
    for w in range(min(len(withdrawals), MAX_LIST)):
        base = (*FLOW, "periods", 0, "dropWithdraws", w)
        reasons = withdrawals[w].get("reasons") or []
        line = Line(study)
        line.lit("Participants withdrawn for ").val((*base, "type")).lit(": ")
        for r in range(min(len(reasons), MAX_LIST)):
            gid = reasons[r].get("groupId")
            line.lit("; " if r else "")
            if gid in groups:
                line.val((*FLOW, "groups", groups[gid], "title")).lit(" ")
            line.val((*base, "reasons", r, "numSubjects"))
        out.append(line.lit(".").sentence())
    return out
