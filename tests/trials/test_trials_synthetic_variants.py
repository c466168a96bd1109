"""Synthetic records with variants (``synthetic_studies(..., variants=True)``,
:mod:`medverify.trials.synthetic_variants`) hold what the summary checks need, stay
deterministic, read clean, leave the samples and the plain synthetic records unchanged."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path

import pytest

from data_paths import data_path
from medverify.trials.reader import ReadReport, iter_studies
from medverify.trials.summary import MAX_EVENTS, MAX_LIST
from medverify.trials.synthetic import (
    is_synthetic,
    load_samples,
    synthetic_studies,
    write_bulk_zip,
)

SAMPLES = data_path("raw/clinicaltrials")
pytestmark = pytest.mark.data("raw/clinicaltrials/*.json")


def test_variants_are_deterministic_and_leave_the_rest_alone() -> None:
    pool = load_samples(SAMPLES)
    before = copy.deepcopy(pool)
    plain = list(synthetic_studies(25, 4, pool))
    varied = list(synthetic_studies(25, 4, pool, variants=True))
    assert pool == before  # the samples are not changed
    assert plain == list(synthetic_studies(25, 4, pool, variants=False))
    assert varied == list(synthetic_studies(25, 4, pool, variants=True))
    assert varied != plain and all(is_synthetic(r) for r in varied)
    ids = [r["protocolSection"]["identificationModule"]["nctId"] for r in plain]
    assert ids == [r["protocolSection"]["identificationModule"]["nctId"] for r in varied]


def test_variants_cover_what_the_summary_checks() -> None:
    statuses: Counter[str] = Counter()
    date_types: Counter[str | None] = Counter()
    found = Counter()
    for study in synthetic_studies(300, 11, SAMPLES, variants=True):
        status = study["protocolSection"]["statusModule"]
        statuses[status["overallStatus"]] += 1
        for key in ("startDateStruct", "primaryCompletionDateStruct", "completionDateStruct"):
            date_types[status[key].get("type")] += 1
        text = json.dumps(study)
        found["escapes"] += "\\\\>" in text or "\\\\[" in text
        conditions = study["protocolSection"].get("conditionsModule", {}).get("conditions", [])
        found["long conditions"] += len(conditions) > MAX_LIST
        results = study.get("resultsSection") or {}
        events = results.get("adverseEventsModule") or {}
        found["36 serious"] += len(events.get("seriousEvents") or []) == 36
        found["many other"] += len(events.get("otherEvents") or []) > MAX_EVENTS
        found["baseline"] += "baselineCharacteristicsModule" in results
        measures = (results.get("outcomeMeasuresModule") or {}).get("outcomeMeasures") or []
        found["11 primary"] += sum(m.get("type") == "PRIMARY" for m in measures) == 11
        found["post hoc"] += any(m.get("type") == "POST_HOC" for m in measures)
    assert set(statuses) == {"NOT_YET_RECRUITING", "RECRUITING", "ENROLLING_BY_INVITATION",
                             "ACTIVE_NOT_RECRUITING", "COMPLETED", "TERMINATED", "WITHDRAWN",
                             "SUSPENDED", "UNKNOWN"}
    assert set(date_types) == {"ACTUAL", "ESTIMATED", "ANTICIPATED", None}
    assert all(found[key] >= 3 for key in ("escapes", "long conditions", "36 serious",
                                           "many other", "baseline", "11 primary",
                                           "post hoc")), found


def test_a_zip_of_variants_reads_clean(tmp_path: Path) -> None:
    bulk = write_bulk_zip(tmp_path / "bulk.zip", 40, seed=2, samples=SAMPLES, variants=True)
    report = ReadReport()
    studies = list(iter_studies(bulk, report=report))
    assert len(studies) == 40 and report.problems == {}
