"""The adverse-event sections: ``serious adverse events``, ``non-serious adverse events`` and
``safety overview`` (deaths, collection notes, withdrawals).

Serious adverse events are never capped: per group, every term with participants affected in
that group, then every term with all groups' affected / at risk, in the record's order (no
order of importance is claimed). Non-serious terms are ranked by participants affected, all
groups together; terms affecting equally many are marked as tied and keep the record's order;
past :data:`~medverify.trials.summary.MAX_EVENTS` the rest are named (or counted) in a note.
When a count is not an integer the ranking is not claimed: the terms keep the record's order.
"""

from __future__ import annotations

from typing import Any

from medverify.trials.summary import (
    AE,
    FLOW,
    MAX_EVENTS,
    Line,
    Sentence,
    group_index,
    left_out,
    not_given,
)

_SERIOUS_LEAD = ("Every serious adverse event term the record lists follows, in the record's "
                 "order: first per group, the terms with participants affected in that group; "
                 "then each term with every group's participants affected / at risk.")
_RANKED_LEAD = ("Non-serious adverse event terms follow from the most to the fewest participants "
                "affected (all groups together); a term marked \"tied\" affected as many "
                "participants as the term before it, and tied terms keep the record's order.")
_UNRANKED_LEAD = ("Non-serious adverse event terms follow in the record's order (not every "
                  "count is a whole number, so they are not ranked).")
_CUT = ("The terms left out affected no more participants (all groups together) than the last "
        "term shown.")


def affected_any(stat: Any) -> bool:
    """Whether a stat states at least one participant affected."""
    value = stat.get("numAffected") if isinstance(stat, dict) else None
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value > 0
    return isinstance(value, str) and value.strip() not in ("", "0")


def _total(event: Any) -> int | None:
    """Participants affected by a term, all groups together; None when a count is not an
    integer."""
    total = 0
    for stat in (event.get("stats") or []) if isinstance(event, dict) else []:
        value = stat.get("numAffected") if isinstance(stat, dict) else None
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        total += value
    return total


def _event(study: dict[str, Any], key: str, e: int, label: str,
           groups: dict[Any, int]) -> Sentence:
    """One term with every group's participants affected / at risk."""
    base = (*AE, key, e)
    line = Line(study)
    line.lit(label).lit(": ").opt("", (*base, "term")).opt(" (", (*base, "organSystem"), ")")
    line.lit(", participants affected / at risk: ")
    stats = line.get((*base, "stats")) or []
    for s in range(len(stats)):
        at = (*base, "stats", s)
        gid = stats[s].get("groupId") if isinstance(stats[s], dict) else None
        line.lit("; " if s else "")
        if gid in groups:
            line.group((*AE, "eventGroups", groups[gid]), " ")
        line.opt("", (*at, "numAffected")).lit("/").opt("", (*at, "numAtRisk"))
    return line.lit(".").sentence()


def _per_group(study: dict[str, Any], key: str, label: str) -> list[Sentence]:
    """Per group: the terms with participants affected in it, with affected / at risk."""
    line = Line(study)
    events = line.get((*AE, key)) or []
    out = []
    for g, group in enumerate(line.get((*AE, "eventGroups")) or []):
        gid = group.get("id") if isinstance(group, dict) else None
        line = Line(study)
        line.lit(f"{label} in ").group((*AE, "eventGroups", g))
        line.lit(" (participants affected / at risk): ")
        written = 0
        for e, event in enumerate(events):
            stats = event.get("stats") if isinstance(event, dict) else None
            for s, stat in enumerate(stats or []):
                if not isinstance(stat, dict) or stat.get("groupId") != gid \
                        or not affected_any(stat):
                    continue
                at = (*AE, key, e, "stats", s)
                line.lit("; " if written else "").opt("", (*AE, key, e, "term"), " ")
                line.val((*at, "numAffected")).lit("/").opt("", (*at, "numAtRisk"))
                written += 1
        if not written:
            line.lit("no listed term has participants affected in this group")
        out.append(line.lit(".").sentence())
    return out


def _group_totals(study: dict[str, Any], label: str, affected: str,
                  at_risk: str) -> Sentence | None:
    """Each group's ``affected``/``at_risk`` totals; None when no group states them."""
    line = Line(study)
    line.lit(f"{label}, participants affected / at risk: ")
    written = 0
    for g in range(len(line.get((*AE, "eventGroups")) or [])):
        base = (*AE, "eventGroups", g)
        if not line.has((*base, affected)):
            continue
        line.lit("; " if written else "").group(base, " ").val((*base, affected))
        line.lit("/").opt("", (*base, at_risk))
        written += 1
    return line.lit(".").sentence() if written else None


def _ae_missing(study: dict[str, Any], what: str) -> list[Sentence] | None:
    if not Line(study).has(AE):
        return not_given(f"The registry record posts no {what} results.")
    return None


def serious_events(study: dict[str, Any]) -> list[Sentence]:
    missing = _ae_missing(study, "serious adverse event")
    if missing:
        return missing
    totals = _group_totals(study, "Serious adverse events", "seriousNumAffected",
                           "seriousNumAtRisk")
    out = [totals] if totals is not None else []
    line = Line(study)
    events = line.get((*AE, "seriousEvents")) or []
    if not events:
        out.append(Sentence(text="The registry record lists no serious adverse event terms.",
                            pointers=[]))
        return out
    out.append(Sentence(text=_SERIOUS_LEAD, pointers=[]))
    out.extend(_per_group(study, "seriousEvents", "Serious adverse events"))
    groups = group_index(line, (*AE, "eventGroups"))
    out.extend(_event(study, "seriousEvents", e, "Serious adverse event", groups)
               for e in range(len(events)))
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
    out = [Sentence(text=head.text + totals.text, pointers=head.pointers + totals.pointers)
           if totals is not None else Sentence(text=head.text + ".", pointers=head.pointers)]
    events = Line(study).get((*AE, "otherEvents")) or []
    if not events:
        out.append(Sentence(text="The registry record lists no non-serious adverse event "
                            "terms.", pointers=[]))
        return out
    totals_by_event = [_total(event) for event in events]
    ranked = all(t is not None for t in totals_by_event)
    order = (sorted(range(len(events)), key=lambda e: (-(totals_by_event[e] or 0), e))
             if ranked else list(range(len(events))))
    out.append(Sentence(text=_RANKED_LEAD if ranked else _UNRANKED_LEAD, pointers=[]))
    groups = group_index(Line(study), (*AE, "eventGroups"))
    shown = order[:MAX_EVENTS]
    for rank, e in enumerate(shown):
        tied = ranked and rank > 0 and totals_by_event[e] == totals_by_event[shown[rank - 1]]
        label = "Non-serious adverse event (tied)" if tied else "Non-serious adverse event"
        out.append(_event(study, "otherEvents", e, label, groups))
    note = left_out(study, (*AE, "otherEvents"), shown, "non-serious adverse event terms",
                    ("term",))
    if note is not None:
        out += [note, Sentence(text=_CUT, pointers=[])] if ranked else [note]
    return out


def safety(study: dict[str, Any]) -> list[Sentence]:
    missing = _ae_missing(study, "adverse event")
    if missing:
        return missing
    deaths = _group_totals(study, "Deaths", "deathsNumAffected", "deathsNumAtRisk")
    out = [deaths] if deaths is not None else []
    line = Line(study)
    if line.has((*AE, "timeFrame")):
        out.append(line.lit("Adverse events were collected over: ").val((*AE, "timeFrame"))
                   .sentence())
    line = Line(study)
    if line.has((*AE, "description")):
        out.append(line.lit("Collection notes: ").val((*AE, "description")).sentence())
    out.extend(_withdrawals(study))
    return out or not_given("The registry record posts no deaths or collection notes.")


def _withdrawals(study: dict[str, Any]) -> list[Sentence]:
    """Participants withdrawn, per period, reason and group (participant flow)."""
    out = []
    line = Line(study)
    groups = group_index(line, (*FLOW, "groups"))
    for p, period in enumerate(line.get((*FLOW, "periods")) or []):
        withdrawals = period.get("dropWithdraws") if isinstance(period, dict) else None
        for w, withdrawal in enumerate(withdrawals or []):
            base = (*FLOW, "periods", p, "dropWithdraws", w)
            reasons = withdrawal.get("reasons") or []
            line = Line(study)
            line.lit("Participants withdrawn").opt(" (", (*FLOW, "periods", p, "title"), ")")
            line.opt(" for ", (*base, "type")).lit(": ")
            for r in range(len(reasons)):
                gid = reasons[r].get("groupId")
                line.lit("; " if r else "")
                if gid in groups:
                    line.group((*FLOW, "groups", groups[gid]), " ")
                line.opt("", (*base, "reasons", r, "numSubjects"))
            out.append(line.lit(".").sentence())
    return out
