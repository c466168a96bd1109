"""The streaming ClinicalTrials.gov study reader and the synthetic records
(``medverify.trials.reader`` / ``medverify.trials.synthetic``)."""

from __future__ import annotations

import gc
import json
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from data_paths import data_path
from medverify.trials.reader import ReadReport, Study, iter_studies
from medverify.trials.synthetic import (
    is_synthetic,
    load_samples,
    synthetic_studies,
    write_bulk_zip,
)

SAMPLES = data_path("raw/clinicaltrials")
NCT_IDS = [
    "NCT00763412",
    "NCT00973089",
    "NCT02210780",
    "NCT03418623",
    "NCT03475563",
    "NCT04207047",
    "NCT05594173",
]

pytestmark = pytest.mark.data(*(f"raw/clinicaltrials/{nct}.json" for nct in NCT_IDS))


def _samples() -> list[dict]:
    return [json.loads((SAMPLES / f"{nct}.json").read_text("utf-8")) for nct in NCT_IDS]


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), "utf-8")
    return path


def _write_zip(path: Path, records: list[dict]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for r in records:
            nct = r["protocolSection"]["identificationModule"]["nctId"]
            zf.writestr(f"{nct}.json", json.dumps(r))
    return path


def _read(paths, **kwargs) -> tuple[list[Study], ReadReport]:
    report = ReadReport()
    return list(iter_studies(paths, report=report, **kwargs)), report


def test_samples_read_from_a_directory() -> None:
    studies, report = _read(SAMPLES)
    assert [s.nct_id for s in studies] == NCT_IDS
    assert report.read == 7 and report.problems == {} and report.dropped == 0
    assert studies[0].source == str(SAMPLES / "NCT00763412.json")
    assert studies[0].data["protocolSection"]["statusModule"]["overallStatus"] == "COMPLETED"


def test_samples_read_from_jsonl_and_zip(tmp_path: Path) -> None:
    jsonl = _write_jsonl(tmp_path / "studies.jsonl", _samples())
    bulk = _write_zip(tmp_path / "ctg-studies.json.zip", _samples())
    from_jsonl, report_jsonl = _read(jsonl)
    from_zip, report_zip = _read(bulk)
    assert [s.nct_id for s in from_jsonl] == NCT_IDS == [s.nct_id for s in from_zip]
    assert [s.data for s in from_jsonl] == _samples() == [s.data for s in from_zip]
    assert from_jsonl[2].source == f"{jsonl}:3"
    assert from_zip[0].source == f"{bulk}:NCT00763412.json"
    assert report_jsonl.problems == {} == report_zip.problems


def test_a_directory_holding_jsonl_and_zip_is_read_recursively(tmp_path: Path) -> None:
    records = _samples()
    (tmp_path / "b").mkdir()
    _write_zip(tmp_path / "b" / "part.zip", records[3:])
    _write_jsonl(tmp_path / "a.jsonl", records[:3])
    (tmp_path / "README.txt").write_text("not a study")
    studies, report = _read(tmp_path)
    assert [s.nct_id for s in studies] == NCT_IDS
    assert report.problems == {}


def test_an_api_page_file_yields_each_study(tmp_path: Path) -> None:
    page = tmp_path / "page.json"
    page.write_text(json.dumps({"studies": _samples()[:2], "nextPageToken": "x"}))
    studies, _ = _read(page)
    assert [s.nct_id for s in studies] == NCT_IDS[:2]
    assert studies[1].source == f"{page}[1]"


def test_resume_skips_done_nct_ids(tmp_path: Path) -> None:
    done = set(NCT_IDS[:4])
    for path in (SAMPLES, _write_zip(tmp_path / "bulk.zip", _samples())):
        studies, report = _read(path, skip=done)
        assert [s.nct_id for s in studies] == NCT_IDS[4:]
        assert report.skipped == 4 and report.read == 3


def test_duplicates_are_counted_and_dropped(tmp_path: Path) -> None:
    jsonl = _write_jsonl(tmp_path / "again.jsonl", _samples()[:2])
    studies, report = _read([SAMPLES, jsonl])
    assert [s.nct_id for s in studies] == NCT_IDS
    assert report.duplicates == 2 and report.read == 7
    assert all(s.source.startswith(str(SAMPLES)) for s in studies)
    assert "NCT00763412 seen before" in report.examples["duplicate"][0]
    assert "duplicate" not in report.problems


def test_truncated_json_file_is_reported_and_the_rest_goes_on(tmp_path: Path) -> None:
    text = (SAMPLES / "NCT00973089.json").read_text("utf-8")
    (tmp_path / "NCT00000001.json").write_text(text[: len(text) // 2])
    (tmp_path / "NCT00973089.json").write_text(text)
    lines = tmp_path / "more.jsonl"
    lines.write_text(json.dumps(_samples()[0]) + "\n" + json.dumps(_samples()[1])[:500] + "\n")
    studies, report = _read(tmp_path)
    assert [s.nct_id for s in studies] == ["NCT00973089", "NCT00763412"]
    assert report.problems == {"invalid_json": 2}
    message = report.examples["invalid_json"][0]
    assert "NCT00000001.json" in message and "truncated" in message
    assert report.examples["invalid_json"][1].startswith(f"{lines}:2: ")


def test_corrupted_zip_member_is_reported_and_the_rest_goes_on(tmp_path: Path) -> None:
    bulk = _write_zip(tmp_path / "bulk.zip", _samples())
    with zipfile.ZipFile(bulk) as zf:
        info = zf.getinfo("NCT02210780.json")
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data = bytearray(bulk.read_bytes())
    for i in range(start + 100, start + 140):  # scramble deflated bytes of that member
        data[i] ^= 0xA5
    bulk.write_bytes(bytes(data))
    studies, report = _read(bulk)
    assert [s.nct_id for s in studies] == [n for n in NCT_IDS if n != "NCT02210780"]
    assert report.problems == {"bad_zip_member": 1}
    assert "NCT02210780.json: cannot decompress" in report.examples["bad_zip_member"][0]


def test_not_a_zip_is_reported(tmp_path: Path) -> None:
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"PK\x03\x04 nothing else")
    studies, report = _read([broken, SAMPLES])
    assert len(studies) == 7 and report.problems == {"bad_zip": 1}


def test_records_without_protocol_section_or_nct_id_are_dropped(tmp_path: Path) -> None:
    no_protocol = {"derivedSection": {}, "hasResults": False}
    no_id = _samples()[1]
    del no_id["protocolSection"]["identificationModule"]["nctId"]
    path = _write_jsonl(tmp_path / "x.jsonl", [no_protocol, no_id, _samples()[0]])
    path.write_text(path.read_text() + "[1, 2]\n")
    studies, report = _read(path)
    assert [s.nct_id for s in studies] == ["NCT00763412"]
    assert report.problems == {"missing_protocol": 1, "missing_nct_id": 1, "not_an_object": 1}
    assert report.dropped == 3
    assert report.examples["missing_protocol"] == [f"{path}:1: no protocolSection"]


def test_non_utf8_bytes_are_replaced_and_counted(tmp_path: Path) -> None:
    record = _samples()[1]
    record["protocolSection"]["identificationModule"]["briefTitle"] = "Caf\u00e9 trial"
    raw = (
        json.dumps(record, ensure_ascii=False)
        .encode("utf-8")
        .replace("Caf\u00e9".encode(), "Caf\u00e9".encode("latin-1"))
    )
    (tmp_path / "one.json").write_bytes(raw)
    (tmp_path / "two.jsonl").write_bytes(raw.replace(b"NCT00973089", b"NCT00000002") + b"\n")
    studies, report = _read(tmp_path)
    assert [s.nct_id for s in studies] == ["NCT00973089", "NCT00000002"]
    title = studies[0].data["protocolSection"]["identificationModule"]["briefTitle"]
    assert title == "Caf\ufffd trial"
    assert report.problems == {"non_utf8": 2}


def test_unknown_fields_and_odd_enums_are_counted_but_kept(tmp_path: Path) -> None:
    record = _samples()[2]
    record["surpriseSection"] = {}
    record["protocolSection"]["statusModule"]["overallStatus"] = "ON_HOLD"
    record["protocolSection"]["designModule"]["phases"] = ["PHASE2", "PHASE 3"]
    record["protocolSection"]["designModule"]["studyType"] = "REGISTRY"
    studies, report = _read(_write_jsonl(tmp_path / "odd.jsonl", [record]))
    assert [s.nct_id for s in studies] == ["NCT02210780"]
    assert report.problems == {
        "unknown_field": 1,
        "odd_overall_status": 1,
        "odd_phase": 1,
        "odd_study_type": 1,
    }
    assert "'surpriseSection'" in report.examples["unknown_field"][0]
    assert report.dropped == 0


def test_missing_file_is_reported(tmp_path: Path) -> None:
    studies, report = _read([tmp_path / "nope.json", SAMPLES])
    assert len(studies) == 7 and report.problems == {"unreadable": 1}


def test_synthetic_records_are_deterministic_marked_and_clean() -> None:
    first = list(synthetic_studies(30, seed=7, samples=SAMPLES))
    assert first == list(synthetic_studies(30, seed=7, samples=_samples()))
    assert first != list(synthetic_studies(30, seed=8, samples=SAMPLES))
    ids = [r["protocolSection"]["identificationModule"]["nctId"] for r in first]
    assert len(set(ids)) == 30 and all(i.startswith("NCT9") and len(i) == 11 for i in ids)
    assert all(is_synthetic(r) for r in first)
    assert not any(is_synthetic(r) for r in load_samples(SAMPLES))
    assert first[0]["derivedSection"]["miscInfoModule"]["versionHolder"] == "synthetic:7:0"
    assert list(iter_studies([])) == []


def test_synthetic_zip_reads_clean(tmp_path: Path) -> None:
    bulk = write_bulk_zip(tmp_path / "bulk.zip", 50, seed=1, samples=SAMPLES)
    studies, report = _read(bulk)
    assert report.read == 50 and report.problems == {} and report.duplicates == 0
    assert all(is_synthetic(s.data) for s in studies)


def test_reading_a_bulk_zip_holds_one_study_at_a_time(tmp_path: Path) -> None:
    bulk = write_bulk_zip(tmp_path / "bulk.zip", 1000, seed=3, samples=SAMPLES)
    with zipfile.ZipFile(bulk) as zf:
        uncompressed = sum(i.file_size for i in zf.infolist())
        largest = max(i.file_size for i in zf.infolist())
    gc.collect()
    tracemalloc.start()
    try:
        report = ReadReport()
        count = 0
        for study in iter_studies(bulk, report=report):
            count += 1
            del study
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 1000 and report.problems == {}
    # One parsed study is a few times its JSON size (the zip's directory of 1,000 entries
    # adds ~0.5 MB); holding the 1,000 studies would take more than their uncompressed size
    # (here the peak is about half the bound below, 1.1 of 2.1 MB).
    assert peak < 20 * largest + 2_000_000
    assert peak < uncompressed / 10
