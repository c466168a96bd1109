"""What a curated trial summary says (issue 31): dates and statuses as the registry types
them, capped lists that say what they left out, every serious adverse event per group,
non-serious terms ranked with ties stated, registry markdown unescaped, phases as the
registry's labels, baseline characteristics; and that the checks of
:mod:`medverify.trials.exactness` catch each way of breaking these."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from data_paths import data_path
from medverify.trials.curate import curate
from medverify.trials.exactness import (
    audit,
    cut_lists,
    dates_as_actual,
    missing_serious_events,
    sentence_problems,
)
from medverify.trials.summary import MAX_EVENTS, MAX_LIST, Sentence, unescape

SAMPLES = data_path("raw/clinicaltrials")
SAMPLE = "raw/clinicaltrials/NCT02210780.json"


def record(status: str = "COMPLETED", **dates: dict[str, str]) -> dict[str, Any]:
    """A small registry record: its status module holds ``dates`` (``start``, ``primary``,
    ``completion``: each a date struct)."""
    keys = {"start": "startDateStruct", "primary": "primaryCompletionDateStruct",
            "completion": "completionDateStruct"}
    status_module: dict[str, Any] = {"overallStatus": status}
    status_module.update({keys[k]: v for k, v in dates.items()})
    return {"protocolSection": {
        "identificationModule": {"nctId": "NCT01234567", "briefTitle": "A trial"},
        "statusModule": status_module,
        "designModule": {"studyType": "INTERVENTIONAL", "phases": ["PHASE2", "PHASE3"]},
    }, "hasResults": False}


def definition(study: dict[str, Any]) -> list[str]:
    return [s.text for s in curate(study).section("definition").sentences]


def clean(study: dict[str, Any]) -> None:
    assert audit(study, curate(study)) == {"inexact": [], "cut": [], "serious_missing": [],
                                           "estimated_as_actual": [], "untyped_as_actual": []}


# -- dates and statuses ------------------------------------------------------------------


def test_not_yet_recruiting_dates_are_expected_not_past() -> None:
    """The issue's case: both dates ESTIMATED, once written 'it started ... and completed'."""
    study = record("NOT_YET_RECRUITING", start={"date": "2024-02-01", "type": "ESTIMATED"},
                   completion={"date": "2025-02-01", "type": "ESTIMATED"})
    text = definition(study)
    assert "Its overall status is not yet recruiting." in text
    assert "It is expected to start on 2024-02-01 (estimated date)." in text
    assert "It is expected to be completed on 2025-02-01 (estimated date)." in text
    assert not any("started" in t or "completed on" in t.replace("be completed on", "")
                   for t in text)
    clean(study)


def test_recruiting_started_and_expected_to_complete() -> None:
    study = record("RECRUITING", start={"date": "2023-05-10", "type": "ACTUAL"},
                   primary={"date": "2026-01", "type": "ESTIMATED"},
                   completion={"date": "2027-06", "type": "ANTICIPATED"})
    text = definition(study)
    assert "It started on 2023-05-10 (actual date)." in text
    assert "It is expected to reach primary completion on 2026-01 (estimated date)." in text
    assert "It is expected to be completed on 2027-06 (anticipated date)." in text
    clean(study)


def test_recruiting_with_an_estimated_start_is_not_expected_to_start() -> None:
    """Recruiting means it has started; the registry still calls the date an estimate."""
    study = record("RECRUITING", start={"date": "2023-05", "type": "ESTIMATED"})
    assert "Its start date is given as 2023-05, an estimated date." in definition(study)
    clean(study)


def test_completed_dates_are_past() -> None:
    study = record("COMPLETED", start={"date": "2014-08-05", "type": "ACTUAL"},
                   primary={"date": "2015-09-15", "type": "ACTUAL"},
                   completion={"date": "2015-09-15", "type": "ACTUAL"})
    text = definition(study)
    assert text[1:5] == ["Its overall status is completed.",
                         "It started on 2014-08-05 (actual date).",
                         "It reached primary completion on 2015-09-15 (actual date).",
                         "It was completed on 2015-09-15 (actual date)."]
    clean(study)


def test_terminated_says_why_and_when_it_ended() -> None:
    study = record("TERMINATED", start={"date": "2019-01", "type": "ACTUAL"},
                   completion={"date": "2020-03-31", "type": "ACTUAL"})
    study["protocolSection"]["statusModule"]["whyStopped"] = "Slow accrual \\(n \\< 10\\)"
    text = definition(study)
    assert "Its overall status is terminated (why stopped: Slow accrual (n < 10))." in text
    assert "It ended on 2020-03-31 (actual date)." in text
    clean(study)
    without = record("TERMINATED", completion={"date": "2020-03-31", "type": "ACTUAL"})
    assert "Its overall status is terminated." in definition(without)


def test_withdrawn_never_started() -> None:
    study = record("WITHDRAWN", start={"date": "2020-01", "type": "ACTUAL"},
                   completion={"date": "2021-01", "type": "ESTIMATED"})
    study["protocolSection"]["statusModule"]["whyStopped"] = "Sponsor decision"
    text = definition(study)
    assert "Its overall status is withdrawn (why stopped: Sponsor decision)." in text
    assert "Its start date is given as 2020-01, an actual date." in text
    assert "Its completion date is given as 2021-01, an estimated date." in text
    assert not any("started" in t or "ended" in t for t in text)
    clean(study)


def test_untyped_and_unknown_status_dates() -> None:
    study = record("UNKNOWN", start={"date": "2006-11"},
                   completion={"date": "2019-12-30", "type": "ESTIMATED"})
    study["protocolSection"]["statusModule"].update(
        {"lastKnownStatus": "RECRUITING", "statusVerifiedDate": "2019-03"})
    text = definition(study)
    assert ("Its overall status is unknown; its last known status was recruiting; the status "
            "was last verified in 2019-03.") in text
    assert ("Its start date is given as 2006-11 (the record does not say whether this date is "
            "actual or estimated).") in text
    assert "Its completion date is given as 2019-12-30, an estimated date." in text
    clean(study)


def test_the_date_check_catches_an_estimate_written_as_past() -> None:
    study = record("UNKNOWN", completion={"date": "2019-12-30", "type": "ESTIMATED"},
                   start={"date": "2006-11"})
    summary = curate(study)
    definition_section = summary.section("definition")
    ref = "/protocolSection/statusModule/completionDateStruct/date"
    start = "/protocolSection/statusModule/startDateStruct/date"
    definition_section.sentences += [
        Sentence(text="It ended on 2019-12-30 (estimated date).", pointers=[ref]),
        Sentence(text="It started on 2006-11.", pointers=[start])]
    found = dates_as_actual(study, summary)
    assert len(found["estimated"]) == 1 and len(found["untyped"]) == 1


# -- phases, escapes -----------------------------------------------------------------------


@pytest.mark.parametrize(("codes", "written"), [
    (["NA"], "(phase: Not Applicable)"), (["EARLY_PHASE1"], "(phase: Early Phase 1)"),
    (["PHASE2", "PHASE3"], "(phase: Phase 2, Phase 3)")])
def test_phases_are_the_registry_labels(codes: list[str], written: str) -> None:
    study = record()
    study["protocolSection"]["designModule"]["phases"] = codes
    (sentence, *_) = curate(study).section("design").sentences
    assert sentence.text == f"This is an interventional study {written}."
    clean(study)


def test_markdown_escapes_are_undone_and_stay_exact() -> None:
    assert unescape("Placebo-\\>OL CZP") == "Placebo->OL CZP"
    assert unescape("\\[9%\\], \\& \\_x\\_ \\\\ a\\b") == "[9%], & _x_ \\ a\\b"
    study = record()
    study["protocolSection"]["identificationModule"]["briefTitle"] = "Placebo-\\>OL CZP \\[12\\]"
    text = definition(study)[0]
    assert text == 'Trial NCT01234567 is titled "Placebo->OL CZP [12]".'
    clean(study)


# -- capped lists --------------------------------------------------------------------------


def test_a_capped_list_names_what_it_left_out() -> None:
    study = record()
    short = [f"Condition {k}" for k in range(MAX_LIST + 5)]
    study["protocolSection"]["conditionsModule"] = {"conditions": short,
                                                    "keywords": ["x" * 90] * 40}
    sentences = curate(study).section("condition").sentences
    assert sentences[0].text.startswith("Conditions studied: Condition 0, ")
    assert sentences[1].text == (f"{MAX_LIST} of {MAX_LIST + 5} conditions are shown; the "
                                 "other 5 are: Condition 25; Condition 26; Condition 27; "
                                 "Condition 28; Condition 29.")
    assert sentences[1].pointers[0] == "/protocolSection/conditionsModule/conditions"
    assert sentences[3].text == (f"{MAX_LIST} of 40 keywords are shown; the other 15 are "
                                 "listed in the registry record.")
    clean(study)


def test_note_counts_and_cuts_are_checked() -> None:
    study = record()
    study["protocolSection"]["conditionsModule"] = {
        "conditions": [f"C{k}" for k in range(MAX_LIST + 2)]}
    summary = curate(study)
    section = summary.section("condition")
    note = section.sentences[1]
    wrong = Sentence(text=note.text.replace(f"of {MAX_LIST + 2}", f"of {MAX_LIST + 3}"),
                     pointers=note.pointers)
    assert sentence_problems(study, wrong)
    del section.sentences[1]
    assert cut_lists(study, summary) == [
        f"/protocolSection/conditionsModule/conditions: {MAX_LIST} of {MAX_LIST + 2} shown, "
        "no note"]


@pytest.mark.data(SAMPLE)
def test_a_number_must_come_from_a_field_its_sentence_points_to() -> None:
    study = json.loads((SAMPLES / "NCT02210780.json").read_text("utf-8"))
    summary = curate(study)
    row = summary.section("primary outcome results").sentences[0]
    assert sentence_problems(study, row) == []
    # 97 is in the record (participants at risk), but not in any field this row points to
    moved = Sentence(text=row.text.replace("83.7", "97"), pointers=row.pointers)
    assert any("number 97" in p for p in sentence_problems(study, moved))


# -- posted results: nothing cut -------------------------------------------------------------


def _with_measures(primary: int, secondary: int) -> dict[str, Any]:
    study = json.loads((SAMPLES / "NCT02210780.json").read_text("utf-8"))
    measures = study["resultsSection"]["outcomeMeasuresModule"]["outcomeMeasures"]
    made = []
    for kind, count in (("PRIMARY", primary), ("SECONDARY", secondary)):
        for k in range(count):
            measure = copy.deepcopy(measures[k % len(measures)])
            measure.update(type=kind, title=f"{kind.title()} measure {k}")
            made.append(measure)
    made.append({**copy.deepcopy(measures[1]), "type": "POST_HOC", "title": "A post hoc one"})
    study["resultsSection"]["outcomeMeasuresModule"]["outcomeMeasures"] = made
    return study


@pytest.mark.data(SAMPLE)
def test_every_posted_measure_is_summarised() -> None:
    """The issue's case: 11 primary and 20 secondary posted measures, once cut at 10."""
    study = _with_measures(11, 20)
    summary = curate(study)
    primary = " ".join(s.text for s in summary.section("primary outcome results").sentences)
    secondary = " ".join(s.text for s in
                         summary.section("secondary outcome key results").sentences)
    assert all(f'"Primary measure {k}"' in primary for k in range(11))
    assert all(f'"Secondary measure {k}"' in secondary for k in range(20))
    assert '"A post hoc one" (post-hoc outcome)' in secondary
    methods = summary.section("secondary outcome methods").sentences
    assert any(s.text.startswith('For the post-hoc outcome "A post hoc one"') for s in methods)
    clean(study)


# -- adverse events --------------------------------------------------------------------------


def _events(serious: list[tuple[int, int]], other: list[tuple[int, int]]) -> dict[str, Any]:
    """A record with two event groups; each event is (affected in group 0, in group 1)."""
    study = record()
    groups = [{"id": "EG000", "title": "Placebo-\\>OL CZP", "seriousNumAffected": 1,
               "seriousNumAtRisk": 50},
              {"id": "EG001", "title": "Drug 10 mg", "seriousNumAffected": 35,
               "seriousNumAtRisk": 51}]

    def events(counts: list[tuple[int, int]], name: str) -> list[dict[str, Any]]:
        return [{"term": f"{name} {k}", "organSystem": "Disorders", "stats": [
            {"groupId": "EG000", "numAffected": a, "numAtRisk": 50},
            {"groupId": "EG001", "numAffected": b, "numAtRisk": 51}]}
            for k, (a, b) in enumerate(counts)]

    study["resultsSection"] = {"adverseEventsModule": {
        "eventGroups": groups, "seriousEvents": events(serious, "Serious event"),
        "otherEvents": events(other, "Other event")}}
    study["hasResults"] = True
    return study


def test_every_serious_event_per_group_none_called_less_frequent() -> None:
    """The issue's case: 36 serious terms, 35 affecting one participant: all are kept."""
    serious = [(0, 1)] * 35 + [(1, 1)]
    study = _events(serious, [])
    sentences = [s.text for s in curate(study).section("serious adverse events").sentences]
    assert sentences[0] == ("Serious adverse events, participants affected / at risk: "
                            "Placebo->OL CZP 1/50; Drug 10 mg 35/51.")
    assert "in the record's order" in sentences[1]
    assert sentences[2] == ("Serious adverse events in Placebo->OL CZP (participants affected "
                            "/ at risk): Serious event 35 1/50.")
    drug = sentences[3]
    assert drug.startswith("Serious adverse events in Drug 10 mg")
    assert all(f"Serious event {k} 1/51" in drug for k in range(36))
    assert sum(t.startswith("Serious adverse event: ") for t in sentences) == 36
    assert not any("frequent" in t.lower() for t in sentences)
    clean(study)


def test_the_serious_check_catches_a_dropped_event() -> None:
    study = _events([(0, 1), (1, 0)], [])
    summary = curate(study)
    section = summary.section("serious adverse events")
    section.sentences = [s for s in section.sentences if "Serious event 1" not in s.text]
    missing = missing_serious_events(study, summary)
    assert any("serious event 1 ('Serious event 1') not in the summary" in m for m in missing)
    assert any("missing from group EG000" in m for m in missing)


def test_non_serious_events_ranked_with_ties_and_capped_with_a_note() -> None:
    other = [(1, 1), (2, 3), (5, 0), (0, 1)] + [(0, 1)] * (MAX_EVENTS + 2)
    study = _events([], other)
    sentences = curate(study).section("non-serious adverse events").sentences
    texts = [s.text for s in sentences]
    assert "from the most to the fewest participants affected" in texts[1]
    assert texts[2].startswith("Non-serious adverse event: Other event 1 ")  # 5
    assert texts[3].startswith("Non-serious adverse event (tied): Other event 2 ")  # 5
    assert texts[4].startswith("Non-serious adverse event: Other event 0 ")  # 2
    assert texts[5].startswith("Non-serious adverse event: Other event 3 ")  # 1
    assert texts[6].startswith("Non-serious adverse event (tied): Other event 4 ")
    total = len(other)
    assert texts[-2].startswith(f"{MAX_EVENTS} of {total} non-serious adverse event terms are "
                                f"shown; the other {total - MAX_EVENTS} are: Other event ")
    assert texts[-1].startswith("The terms left out affected no more participants")
    assert "The registry record lists no serious adverse event terms." in [
        s.text for s in curate(study).section("serious adverse events").sentences]
    clean(study)


def test_unranked_when_a_count_is_not_a_number() -> None:
    study = _events([], [(1, 1), (2, 3)])
    study["resultsSection"]["adverseEventsModule"]["otherEvents"][0]["stats"][0][
        "numAffected"] = "1"
    texts = [s.text for s in curate(study).section("non-serious adverse events").sentences]
    assert "in the record's order" in texts[1] and "Other event 0" in texts[2]
    assert not any("tied" in t for t in texts)


# -- baseline --------------------------------------------------------------------------------


@pytest.mark.data(SAMPLE)
def test_baseline_characteristics_section() -> None:
    study = json.loads((SAMPLES / "NCT02210780.json").read_text("utf-8"))
    texts = [s.text for s in curate(study).section("baseline characteristics").sentences]
    assert texts[1] == "Participants analyzed: Placebo qw 97; Dupilumab 300 mg qw 97; Total 194."
    assert ('Baseline "Age, Continuous", mean in years: Placebo qw 39.9 (standard deviation '
            '14.04); Dupilumab 300 mg qw 39.2 (standard deviation 13.55); Total 39.6 (standard '
            'deviation 13.77).') in texts
    assert ('Baseline "Sex: Female, Male" [Female], count of participants in Participants: '
            'Placebo qw 51; Dupilumab 300 mg qw 48; Total 99.') in texts
    # a class whose participants analyzed differ from the module's is said so
    measure = study["resultsSection"]["baselineCharacteristicsModule"]["measures"][0]
    measure["classes"][0]["denoms"][0]["counts"][0]["value"] = "95"
    texts = [s.text for s in curate(study).section("baseline characteristics").sentences]
    assert ('"Age, Continuous": Participants analyzed: Placebo qw 95; Dupilumab 300 mg qw 97; '
            'Total 194.') in texts
    clean(study)
