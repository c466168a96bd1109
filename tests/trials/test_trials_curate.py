"""Curated ClinicalTrials.gov summaries are exact and traceable: every number comes from
the fields its sentence points to, every pointer names a field whose value is in the
sentence, nothing is cut without a note, and the summary is the same every time
(:mod:`medverify.trials.curate`, checked with :mod:`medverify.trials.exactness`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from data_paths import data_files, data_path
from medverify.cli import main
from medverify.kb import KnowledgeBase
from medverify.kb.loaders import LoadReport, iter_ctgov
from medverify.retrieve import Retriever
from medverify.trials.curate import (
    ALL_SECTIONS,
    SECTIONS,
    curate,
    select_studies,
    summary_documents,
)
from medverify.trials.exactness import audit, numbers
from medverify.trials.summary import forms, resolve

SAMPLES = data_path("raw/clinicaltrials")
FILES = data_files("raw/clinicaltrials/*.json")
pytestmark = pytest.mark.data("raw/clinicaltrials/*.json")

RESULTS_SECTIONS = (
    "primary outcome statistical analysis", "primary outcome results",
    "secondary outcome methods", "secondary outcome key results",
    "serious adverse events", "non-serious adverse events", "safety overview",
    "baseline characteristics",
)


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text("utf-8"))


def scalars(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for value in node.values() for s in scalars(value)]
    if isinstance(node, list):
        return [s for value in node for s in scalars(value)]
    return [] if node is None or isinstance(node, bool) else [str(node)]


@pytest.fixture(params=FILES, ids=lambda p: p.stem)
def study(request: pytest.FixtureRequest) -> dict[str, Any]:
    return load(request.param)


def test_sections_in_order(study: dict[str, Any]) -> None:
    summary = curate(study)
    assert [s.name for s in summary.sections] == list(ALL_SECTIONS) and len(SECTIONS) == 15
    assert ALL_SECTIONS[:15] == SECTIONS and ALL_SECTIONS[15:] == ("baseline characteristics",)
    assert summary.nct_id == study["protocolSection"]["identificationModule"]["nctId"]
    assert all(section.sentences for section in summary.sections)
    assert all(sentence.text for section in summary.sections for sentence in section.sentences)


def test_every_number_is_copied_from_the_record(study: dict[str, Any]) -> None:
    """Each number token of the summary is a whole number token of some record value (so
    34.0 written as 34, or 0.0001 as 1e-4, would fail)."""
    tokens = {n for value in scalars(study) for n in numbers(value)}
    for section in curate(study).sections:
        for sentence in section.sentences:
            for number in numbers(sentence.text):
                assert number in tokens, (section.name, number, sentence.text)


def test_number_check_catches_a_reformatted_number() -> None:
    study = load(SAMPLES / "NCT02210780.json")
    tokens = {n for value in scalars(study) for n in numbers(value)}
    assert "34.0" in tokens and "24.29" in tokens and "34.00" not in tokens


def test_every_pointer_names_a_field_in_the_sentence(study: dict[str, Any]) -> None:
    checked = 0
    for section in curate(study).sections:
        for sentence in section.sentences:
            for ref in sentence.pointers:
                assert ref.startswith("/")
                value = resolve(study, ref)  # raises KeyError when the field is missing
                if isinstance(value, bool | dict | list):
                    continue
                assert any(form in sentence.text for form in forms(value)), (ref, value)
                checked += 1
    assert checked > 10


def test_every_guarantee_holds_on_the_samples(study: dict[str, Any]) -> None:
    """Each number is in a field its own sentence points to; no list is cut without a note;
    every serious adverse event is there, per group; no estimated date is written as past."""
    found = audit(study, curate(study))
    assert found == {"inexact": [], "cut": [], "serious_missing": [],
                     "estimated_as_actual": [], "untyped_as_actual": []}


def test_rebuilt_summary_is_byte_identical(study: dict[str, Any]) -> None:
    assert curate(study).model_dump_json() == curate(json.loads(json.dumps(study))) \
        .model_dump_json()


def test_missing_sections_say_so_without_pointers() -> None:
    without = [load(p) for p in FILES if not load(p).get("hasResults")]
    assert without
    for study in without:
        summary = curate(study)
        for name in RESULTS_SECTIONS:
            (sentence,) = summary.section(name).sentences
            assert sentence.pointers == [] and "posts no" in sentence.text
        assert summary.section("primary outcome statistical analysis").sentences[0].text == (
            "The registry record posts no results for the primary outcome.")
    assert curate({}).section("definition").sentences[0].pointers == []


def test_results_record_fills_results_sections() -> None:
    study = load(SAMPLES / "NCT02210780.json")
    summary = curate(study)
    primary = " ".join(s.text for s in summary.section("primary outcome results").sentences)
    assert "83.7" in primary and "83.3" in primary and "Placebo qw" in primary
    methods = " ".join(s.text for s in summary.section("secondary outcome methods").sentences)
    assert "p-value <0.0001" in methods and "24.29 to 43.75" in methods
    assert "Cochran-Mantel-Haenszel" in methods
    serious = summary.section("serious adverse events").sentences
    assert "Dupilumab 300 mg qw 3/97" in serious[0].text
    other = summary.section("non-serious adverse events").sentences
    assert "most to the fewest participants" in other[1].text and not other[1].pointers
    assert "Upper respiratory tract infection" in other[2].text  # most frequent first
    assert other[5].text.startswith("Non-serious adverse event: Conjunctivitis")
    assert other[6].text.startswith("Non-serious adverse event (tied): Headache")  # 8 and 8
    for s in summary.section("primary outcome results").sentences:
        assert any(p.endswith("/value") for p in s.pointers)


def test_documents_one_per_section(study: dict[str, Any]) -> None:
    summary = curate(study)
    docs = summary_documents(summary, study)
    nct = summary.nct_id
    assert docs[0].doc_id == f"{nct}#definition"
    assert docs[-1].doc_id == f"{nct}#baseline-characteristics"
    assert len({d.doc_id for d in docs}) == 16
    for doc, section in zip(docs, summary.sections, strict=True):
        assert doc.url == f"https://clinicaltrials.gov/study/{nct}"
        assert doc.title and doc.title.startswith(nct) and doc.title.endswith(section.name)
        assert doc.meta["nct_id"] == nct and doc.meta["section"] == section.name
        assert doc.meta["has_results"] == bool(study.get("hasResults"))
        assert set(doc.meta) >= {"phases", "conditions", "interventions", "overall_status"}


def test_select_studies() -> None:
    studies = [load(p) for p in FILES]
    with_results = select_studies(studies)
    assert all(s["hasResults"] for s in with_results) and with_results
    assert len(select_studies(studies, results_posted=None)) == len(studies)
    dermatitis = select_studies(studies, condition="ATOPIC", results_posted=None)
    assert [s["protocolSection"]["identificationModule"]["nctId"] for s in dermatitis] == [
        "NCT02210780"]
    one = select_studies(studies, results_posted=None, n=3, seed=7)
    assert len(one) == 3 and one == select_studies(studies, results_posted=None, n=3, seed=7)
    assert [studies.index(s) for s in one] == sorted(studies.index(s) for s in one)
    seeds = {tuple(id(s) for s in select_studies(studies, results_posted=None, n=3, seed=k))
             for k in range(10)}
    assert len(seeds) > 1


def test_iter_ctgov_filters_and_samples() -> None:
    report = LoadReport()
    docs = list(iter_ctgov([SAMPLES], report, results_only=True))
    assert {d.meta["nct_id"] for d in docs} == {
        p.stem for p in FILES if load(p).get("hasResults")}
    assert report.documents == len(docs) == 16 * len({d.meta["nct_id"] for d in docs})
    sampled = list(iter_ctgov([SAMPLES], sample=2, seed=1))
    assert len({d.meta["nct_id"] for d in sampled}) == 2
    assert [d.doc_id for d in sampled] == [d.doc_id for d in iter_ctgov([SAMPLES], sample=2,
                                                                        seed=1)]
    assert len(list(iter_ctgov([SAMPLES], limit=4))) == 4


def test_kb_ingest_ctgov_and_search(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    result = CliRunner().invoke(main, ["kb", "ingest", str(SAMPLES), "--kb", str(kb),
                                       "--embedder", "hash", "--format", "ctgov"])
    assert result.exit_code == 0, result.output
    assert f"added {16 * len(FILES)} documents" in result.output
    with KnowledgeBase.open(kb) as base:
        passages = Retriever(base).search("dupilumab conjunctivitis adverse events", k=20)
    hits = [p for p in passages if p.doc_id.startswith("NCT02210780#")]
    assert hits and all(p.url == "https://clinicaltrials.gov/study/NCT02210780" for p in hits)
    assert any("Conjunctivitis" in p.text for p in hits)
    bad = CliRunner().invoke(main, ["kb", "ingest", str(SAMPLES), "--kb", str(kb),
                                    "--results-only"])
    assert bad.exit_code != 0 and "--format ctgov" in bad.output
    result = CliRunner().invoke(main, ["kb", "ingest", str(SAMPLES), "--kb", str(tmp_path / "k2"),
                                       "--embedder", "hash", "--format", "ctgov",
                                       "--condition", "dermatitis", "--results-only"])
    assert result.exit_code == 0 and "added 16 documents" in result.output, result.output
