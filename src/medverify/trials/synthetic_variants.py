"""Variations that make synthetic records (:mod:`medverify.trials.synthetic`, with
``variants=True``) exercise what a curated summary must get right on records unlike the 7
samples: every overall status with the date types the registry gives it (estimated,
anticipated, untyped; ``whyStopped``, ``lastKnownStatus``), registry markdown escapes in
titles and group names, long lists (conditions, keywords, other names, posted outcome
measures of every type, result rows, analyses, flow periods), many serious adverse events
with tied counts, more non-serious terms than the summary shows, and baseline
characteristics with many rows.

:func:`vary` changes one record in place, with its own random generator, so the plain
synthetic records stay what they were. The values it writes are made up: they test the
summary, not any clinical question.
"""

from __future__ import annotations

import copy
import random
from typing import Any

STATUSES = ("NOT_YET_RECRUITING", "RECRUITING", "ENROLLING_BY_INVITATION",
            "ACTIVE_NOT_RECRUITING", "COMPLETED", "TERMINATED", "WITHDRAWN", "SUSPENDED",
            "UNKNOWN")
RESULT_STATUSES = ("COMPLETED", "TERMINATED", "ACTIVE_NOT_RECRUITING", "UNKNOWN")
_WHY = ("Sponsor decision", "Slow accrual \\(fewer than planned\\)",
        "Funding ended \\- see \\[notice\\]", "Safety concerns \\> benefit")
_ESCAPED = ("-\\>OL", " \\& extension", " \\[cohort A\\]", " \\(part\\_1\\)", " \\#2", " \\*")
_TERMS = ("Malignant melanoma", "Deep vein thrombosis", "Pneumonia", "Sepsis",
          "Myocardial infarction", "Pulmonary embolism", "Acute kidney injury", "Syncope",
          "Atrial fibrillation", "Cellulitis", "Anaphylactic reaction", "Hepatitis",
          "Pancreatitis", "Stroke", "Fall", "Hip fracture", "Dehydration", "Hyponatraemia",
          "Febrile neutropenia", "Urinary tract infection")
_ORGANS = ("Infections and infestations", "Vascular disorders", "Cardiac disorders",
           "Neoplasms benign, malignant and unspecified (incl cysts and polyps)",
           "Nervous system disorders", "Injury, poisoning and procedural complications")


def vary(record: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Apply the variations to one record (changed in place and returned: pass a record of
    its own, not one sharing dicts with the samples)."""
    protocol = record["protocolSection"]
    results = record.get("resultsSection")
    _status(protocol, rng, bool(results))
    _lists(protocol, rng)
    if isinstance(results, dict):
        _escape_groups(results, rng)
        _measures(results, rng)
        _flow(results, rng)
        _adverse_events(results, rng)
        _baseline(results, rng)
    return record


def _date(rng: random.Random, year: int) -> str:
    month = rng.randrange(1, 13)
    return f"{year}-{month:02d}" if rng.random() < 0.3 else \
        f"{year}-{month:02d}-{rng.randrange(1, 29):02d}"


def _types(status: str, rng: random.Random) -> tuple[str | None, str | None, str | None]:
    """The date types (start, primary completion, completion) for a status."""
    estimate = "ANTICIPATED" if rng.random() < 0.2 else "ESTIMATED"
    if status == "NOT_YET_RECRUITING":
        return estimate, estimate, estimate
    if status in ("RECRUITING", "ENROLLING_BY_INVITATION"):
        return ("ESTIMATED" if rng.random() < 0.2 else "ACTUAL"), estimate, estimate
    if status in ("ACTIVE_NOT_RECRUITING", "SUSPENDED", "UNKNOWN"):
        return "ACTUAL", rng.choice(("ACTUAL", "ESTIMATED")), "ESTIMATED"
    if status == "WITHDRAWN":
        return rng.choice(("ESTIMATED", "ACTUAL", None)), "ESTIMATED", "ESTIMATED"
    start = None if rng.random() < 0.15 else "ACTUAL"
    return start, "ACTUAL", "ACTUAL"


def _status(protocol: dict[str, Any], rng: random.Random, results: bool) -> None:
    status = rng.choice(RESULT_STATUSES if results else STATUSES)
    year = rng.randrange(2001, 2026)
    module: dict[str, Any] = {"statusVerifiedDate": _date(rng, year + 1)[:7],
                              "overallStatus": status}
    if status in ("TERMINATED", "WITHDRAWN", "SUSPENDED"):
        module["whyStopped"] = rng.choice(_WHY)
    if status == "UNKNOWN":
        module["lastKnownStatus"] = rng.choice(("RECRUITING", "ACTIVE_NOT_RECRUITING"))
    keys = ("startDateStruct", "primaryCompletionDateStruct", "completionDateStruct")
    for offset, (key, kind) in enumerate(zip(keys, _types(status, rng), strict=True)):
        struct: dict[str, Any] = {"date": _date(rng, year + 2 * offset)}
        if kind is not None:
            struct["type"] = kind
        module[key] = struct
    protocol["statusModule"] = module


def _lists(protocol: dict[str, Any], rng: random.Random) -> None:
    ident = protocol.get("identificationModule") or {}
    if isinstance(ident.get("briefTitle"), str) and rng.random() < 0.5:
        ident["briefTitle"] += rng.choice(_ESCAPED)
    conditions = protocol.get("conditionsModule")
    if isinstance(conditions, dict) and rng.random() < 0.3:
        count = rng.choice((12, 26, 40))
        conditions["conditions"] = [*conditions.get("conditions", []),
                                    *(f"Condition {k} of a long list" for k in range(count))]
        conditions["keywords"] = [*conditions.get("keywords", []),
                                  *(f"keyword-{k}" for k in range(rng.choice((5, 30))))]
    arms = protocol.get("armsInterventionsModule")
    if isinstance(arms, dict) and arms.get("interventions") and rng.random() < 0.3:
        first = arms["interventions"][0]
        first["otherNames"] = [f"CODE-{k}" for k in range(rng.choice((3, 27, 60)))]


def _escape_groups(results: dict[str, Any], rng: random.Random) -> None:
    """Registry escapes in group titles (``Placebo-\\>OL CZP``), the same in every module."""
    if rng.random() < 0.5:
        return
    suffix = rng.choice(_ESCAPED)
    for name in ("participantFlowModule", "baselineCharacteristicsModule",
                 "adverseEventsModule"):
        module = results.get(name) or {}
        for group in module.get("groups") or module.get("eventGroups") or []:
            group["title"] = f"{group.get('title', 'Group')}{suffix}"
    for measure in (results.get("outcomeMeasuresModule") or {}).get("outcomeMeasures") or []:
        for group in measure.get("groups") or []:
            group["title"] = f"{group.get('title', 'Group')}{suffix}"


def _value(rng: random.Random) -> str:
    return rng.choice((str(rng.randrange(0, 300)), f"{rng.uniform(-50, 150):.1f}",
                       f"{rng.uniform(0, 1):.3f}", "NA"))


def _measures(results: dict[str, Any], rng: random.Random) -> None:
    """More posted measures of every type, more rows and analyses."""
    module = results.get("outcomeMeasuresModule")
    measures = (module or {}).get("outcomeMeasures") or []
    if not measures or rng.random() < 0.4:
        return
    wanted = {"PRIMARY": rng.choice((1, 3, 11)), "SECONDARY": rng.choice((4, 20, 35)),
              "OTHER_PRE_SPECIFIED": rng.choice((0, 2)), "POST_HOC": rng.choice((0, 1))}
    made = []
    for kind, count in wanted.items():
        for k in range(count):
            measure = copy.deepcopy(rng.choice(measures))
            measure["type"] = kind
            measure["title"] = f"{measure.get('title', 'Measure')} \\[{kind.lower()} {k}\\]"
            _revalue(measure, rng)
            made.append(measure)
    module["outcomeMeasures"] = made


def _revalue(measure: dict[str, Any], rng: random.Random) -> None:
    """New values, sometimes many rows and analyses, for a copied measure."""
    classes = measure.get("classes") or []
    if classes and classes[0].get("categories") and rng.random() < 0.3:
        template = classes[0]["categories"][0]
        template_rows = [copy.deepcopy(template) for _ in range(rng.choice((9, 14)))]
        for k, row in enumerate(template_rows):
            row["title"] = f"Visit {k}"
        classes[0]["categories"] = template_rows
    for cls in classes:
        for category in cls.get("categories") or []:
            for cell in category.get("measurements") or []:
                cell["value"] = _value(rng)
    analyses = measure.get("analyses") or []
    if analyses and rng.random() < 0.3:
        measure["analyses"] = [{**copy.deepcopy(analyses[0]), "pValue": f"0.{k}{k}"}
                               for k in range(1, rng.choice((4, 7)))]


def _flow(results: dict[str, Any], rng: random.Random) -> None:
    flow = results.get("participantFlowModule") or {}
    periods = flow.get("periods") or []
    if periods and rng.random() < 0.4:
        extra = copy.deepcopy(periods[0])
        extra["title"] = "Open-label extension \\(OLE\\)"
        periods.append(extra)


def _stats(groups: list[dict[str, Any]], rng: random.Random, weights: tuple[int, ...],
           ) -> list[dict[str, Any]]:
    at_risk = [rng.randrange(20, 400) for _ in groups]
    return [{"groupId": g.get("id"), "numEvents": n + rng.randrange(0, 2), "numAffected": n,
             "numAtRisk": risk}
            for g, risk in zip(groups, at_risk, strict=True)
            for n in [rng.choice(weights)]]


def _adverse_events(results: dict[str, Any], rng: random.Random) -> None:
    """Many serious events (mostly one participant each: ties) and sometimes more
    non-serious terms than the summary shows."""
    module = results.get("adverseEventsModule")
    groups = (module or {}).get("eventGroups") or []
    if not groups:
        return
    serious = [{"term": f"{rng.choice(_TERMS)} {k}" if k >= len(_TERMS) else _TERMS[k],
                "organSystem": rng.choice(_ORGANS), "assessmentType": "SYSTEMATIC_ASSESSMENT",
                "stats": _stats(groups, rng, (0, 0, 1, 1, 1, 2))}
               for k in range(rng.choice((0, 3, 12, 36)))]
    module["seriousEvents"] = serious
    if rng.random() < 0.5:
        module["otherEvents"] = [
            {"term": f"Other event {k}", "organSystem": rng.choice(_ORGANS),
             "stats": _stats(groups, rng, (0, 3, 5, 5, 8, 13))}
            for k in range(rng.choice((10, 49, 51, 80)))]


def _baseline(results: dict[str, Any], rng: random.Random) -> None:
    """A baseline module when the record has none (groups from the event groups), and
    sometimes a race measure with many classes."""
    module = results.get("baselineCharacteristicsModule")
    if not isinstance(module, dict):
        events = (results.get("adverseEventsModule") or {}).get("eventGroups") or []
        if not events:
            return
        groups = [{"id": f"BG00{k}", "title": g.get("title", f"Group {k}")}
                  for k, g in enumerate(events)]
        counts = [{"groupId": g["id"], "value": str(rng.randrange(10, 300))} for g in groups]
        module = results["baselineCharacteristicsModule"] = {
            "groups": groups, "denoms": [{"units": "Participants", "counts": counts}],
            "measures": []}
    groups = module.get("groups") or []
    if rng.random() < 0.5:
        return
    classes = [{"title": f"Race category {k}", "categories": [{"measurements": [
        {"groupId": g.get("id"), "value": str(rng.randrange(0, 60))} for g in groups]}]}
        for k in range(rng.choice((3, 12)))]
    module.setdefault("measures", []).append(
        {"title": "Race \\(self\\-reported\\)", "paramType": "COUNT_OF_PARTICIPANTS",
         "unitOfMeasure": "Participants", "classes": classes})
