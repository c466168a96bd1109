"""Property tests of the curated summary's guarantees (:mod:`medverify.trials.exactness`) on
records no one wrote by hand: synthetic records with variants (every status and date type,
markdown escapes, long lists, many serious events with ties, baseline), and records drawn
field by field by hypothesis, with odd text (digits, escapes, punctuation, empty strings)
in every place the summary copies text from. For each: every number of a sentence is in a
field the sentence points to, every pointer's value is in its sentence, no list is cut
without a note, every serious adverse event is there per group, no estimated or untyped
date is written as past, and the summary is the same when built again."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_paths import data_path
from medverify.trials.curate import curate
from medverify.trials.exactness import audit
from medverify.trials.summary import text_of
from medverify.trials.synthetic import load_samples, synthetic_studies

CLEAN = {"inexact": [], "cut": [], "serious_missing": [], "estimated_as_actual": [],
         "untyped_as_actual": []}

_text = st.text(alphabet=st.sampled_from([*"ab Z09.-,%<>\\[]()*_&#/;:+", "\n", "é"]),
                max_size=16)
# What names an item of a list (a term, a value, a name) is never empty in the registry:
# an item with nothing to write would count as left out.
_name = _text.filter(lambda t: text_of(t) != "")
_value = st.one_of(st.integers(-500, 500).map(str), _name,
                   st.sampled_from(["NA", "<0.001", "1,000", "-2.13", ".5", "1e-4"]))
_count = st.one_of(st.integers(0, 6), st.sampled_from(["2", "0"]))
_DATE_TYPES = st.sampled_from(["ACTUAL", "ESTIMATED", "ANTICIPATED", None])
_STATUSES = st.sampled_from(["NOT_YET_RECRUITING", "RECRUITING", "ENROLLING_BY_INVITATION",
                             "ACTIVE_NOT_RECRUITING", "COMPLETED", "TERMINATED", "WITHDRAWN",
                             "SUSPENDED", "UNKNOWN"])


@st.composite
def _status(draw: st.DrawFn) -> dict[str, Any]:
    module: dict[str, Any] = {"overallStatus": draw(_STATUSES)}
    if draw(st.booleans()):
        module["whyStopped"] = draw(_text)
    for key in ("startDateStruct", "primaryCompletionDateStruct", "completionDateStruct"):
        if draw(st.booleans()):
            kind = draw(_DATE_TYPES)
            date = draw(st.sampled_from(["2024-02-01", "2019-12", "2031-07-15"]))
            module[key] = {"date": date, **({"type": kind} if kind else {})}
    return module


@st.composite
def _protocol(draw: st.DrawFn) -> dict[str, Any]:
    interventions = [{"name": draw(_name), "type": "DRUG",
                      "otherNames": draw(st.lists(_name, max_size=30))}
                     for _ in range(draw(st.integers(0, 3)))]
    return {
        "identificationModule": {"nctId": "NCT09999999", "briefTitle": draw(_text)},
        "statusModule": draw(_status()),
        "conditionsModule": {"conditions": draw(st.lists(_name, max_size=30)),
                             "keywords": draw(st.lists(_value, max_size=30))},
        "designModule": {"studyType": "INTERVENTIONAL", "phases": draw(st.lists(
            st.sampled_from(["NA", "EARLY_PHASE1", "PHASE1", "PHASE2", "PHASE3"]),
            max_size=2, unique=True))},
        "armsInterventionsModule": {"interventions": interventions, "armGroups": [
            {"label": draw(_name), "interventionNames": draw(st.lists(_name, max_size=28))}
            for _ in range(draw(st.integers(0, 2)))]},
        "outcomesModule": {"primaryOutcomes": [{"measure": draw(_name), "timeFrame": draw(_text)}
                                               for _ in range(draw(st.integers(0, 3)))]},
    }


def _groups(prefix: str, titles: list[str]) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{k:03d}", "title": t} for k, t in enumerate(titles)]


@st.composite
def _cells(draw: st.DrawFn, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cells = []
    for group in groups:
        cell = {"groupId": group["id"], "value": draw(_value)}
        if draw(st.booleans()):
            cell["spread"] = draw(_value)
        cells.append(cell)
    return cells


@st.composite
def _measure(draw: st.DrawFn, groups: list[dict[str, Any]]) -> dict[str, Any]:
    classes = [{"title": draw(_text), "categories": [
        {"title": draw(_text), "measurements": draw(_cells(groups))}
        for _ in range(draw(st.integers(1, 3)))]} for _ in range(draw(st.integers(0, 2)))]
    return {"type": draw(st.sampled_from(["PRIMARY", "SECONDARY", "POST_HOC",
                                          "OTHER_PRE_SPECIFIED"])),
            "title": draw(_name), "paramType": "MEAN", "dispersionType": "STANDARD_DEVIATION",
            "unitOfMeasure": draw(_text), "timeFrame": draw(_text), "groups": groups,
            "denoms": [{"units": "Participants", "counts": [
                {"groupId": g["id"], "value": draw(_value)} for g in groups]}],
            "classes": classes,
            "analyses": [{"groupIds": [g["id"] for g in groups], "pValue": draw(_value),
                          "paramType": draw(_text), "paramValue": draw(_value)}
                         for _ in range(draw(st.integers(0, 2)))]}


@st.composite
def _events(draw: st.DrawFn, groups: list[dict[str, Any]], most: int) -> list[dict[str, Any]]:
    return [{"term": draw(_name), "organSystem": draw(_text), "stats": [
        {"groupId": g["id"], "numAffected": draw(_count), "numAtRisk": draw(_count)}
        for g in groups]} for _ in range(draw(st.integers(0, most)))]


@st.composite
def _results(draw: st.DrawFn) -> dict[str, Any]:
    titles = draw(st.lists(_text, min_size=1, max_size=3))
    outcome, events = _groups("OG", titles), _groups("EG", titles)
    baseline, flow = _groups("BG", titles), _groups("FG", titles)
    for group in events:
        group.update(seriousNumAffected=draw(_count), seriousNumAtRisk=draw(_count))
    return {
        "participantFlowModule": {"groups": flow, "periods": [
            {"title": draw(_text), "milestones": [
                {"type": kind, "achievements": [{"groupId": g["id"], "numSubjects": draw(_value)}
                                                for g in flow]}
                for kind in ("STARTED", "COMPLETED")],
             "dropWithdraws": [{"type": draw(_name), "reasons": [
                 {"groupId": g["id"], "numSubjects": draw(_value)} for g in flow]}]}
            for _ in range(draw(st.integers(0, 2)))]},
        "outcomeMeasuresModule": {"outcomeMeasures": [
            draw(_measure(outcome)) for _ in range(draw(st.integers(0, 3)))]},
        "adverseEventsModule": {"eventGroups": events,
                                "seriousEvents": draw(_events(events, 8)),
                                "otherEvents": draw(_events(events, 55))},
        "baselineCharacteristicsModule": {
            "groups": baseline, "denoms": [{"units": "Participants", "counts": [
                {"groupId": g["id"], "value": draw(_value)} for g in baseline]}],
            "measures": [{**draw(_measure(baseline)), "groups": None}
                         for _ in range(draw(st.integers(0, 2)))]},
    }


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    record: dict[str, Any] = {"protocolSection": draw(_protocol()), "hasResults": False}
    if draw(st.booleans()):
        record["resultsSection"] = draw(_results())
        record["hasResults"] = True
    return record


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(study=records())
def test_guarantees_hold_on_drawn_records(study: dict[str, Any]) -> None:
    summary = curate(study)
    assert audit(study, summary) == CLEAN
    assert curate(study).model_dump_json() == summary.model_dump_json()


@functools.cache
def _pool() -> list[dict[str, Any]]:
    return load_samples(data_path("raw/clinicaltrials"))


@pytest.mark.data("raw/clinicaltrials/*.json")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31))
def test_guarantees_hold_on_synthetic_records_with_variants(seed: int) -> None:
    (study,) = synthetic_studies(1, seed, _pool(), variants=True)
    assert audit(study, curate(study)) == CLEAN
