from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from medverify.errors import InputError
from medverify.files import atomic_write_text
from medverify.records import CheckFinding, CheckKind, ClaimResult, Report
from medverify.report import render_json
from medverify.report.metrics import compute_metrics
from medverify.report.render_json import read_json, report_to_json, write_json
from medverify.report.schema import report_json_schema
from report_fixtures import example_report

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "report.schema.json"


def test_json_round_trips_and_keeps_non_ascii() -> None:
    report = example_report()
    text = report_to_json(report)
    assert Report.model_validate_json(text) == report
    assert "m²" in text and "\\u00b2" not in text
    assert text.startswith("{\n  ")
    assert json.loads(text)["metrics"]["n_errors"] == 1


def test_write_json_leaves_only_the_target(tmp_path: Path) -> None:
    target = tmp_path / "out" / "report.json"
    write_json(example_report(), target)
    write_json(example_report(), target)  # overwrite
    assert [p.name for p in target.parent.iterdir()] == ["report.json"]
    assert read_json(target) == example_report()
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_failed_write_keeps_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "report.json"
    target.write_text("old", encoding="utf-8")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(render_json.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(target, "new")
    assert target.read_text(encoding="utf-8") == "old"
    assert os.listdir(tmp_path) == ["report.json"]


def test_read_json_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        read_json(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"answer": 1}', encoding="utf-8")
    with pytest.raises(InputError, match="not a medverify report"):
        read_json(bad)


def test_committed_schema_is_up_to_date() -> None:
    assert SCHEMA_FILE.is_file(), "run: python -m medverify.report.schema"
    assert SCHEMA_FILE.read_text(encoding="utf-8") == report_json_schema(), (
        "docs/report.schema.json is stale: run `python -m medverify.report.schema`"
    )


def test_schema_describes_the_report() -> None:
    schema = json.loads(report_json_schema())
    assert schema["title"] == "Report"
    assert {"answer", "results", "metrics"} <= set(schema["required"])
    assert "ClaimResult" in schema["$defs"]


def test_json_carries_whether_each_verdict_is_confident_and_why_not() -> None:
    report = example_report()
    results = list(report.results)
    first = results[0]
    assert first.verdict is not None
    finding = CheckFinding(kind=CheckKind.NUMBER, veto=True, passage_id="ada-9#3",
                           claim_says="2", passage_says="10",
                           reason="the claim says <script>2</script>; the passage says 10")
    verdict = first.verdict.model_copy(update={
        "findings": [finding], "confident": False, "confidence": 0.62,
        "not_sure": "P(supported)=0.62, below the 0.81 needed"})
    results[0] = ClaimResult.from_verdict(first.claim, first.passages, verdict)
    results[1] = results[1].model_copy(update={"confident": True, "confidence": 0.93})
    report = report.model_copy(update={"results": results, "metrics": compute_metrics(results)})
    text = report_to_json(report)
    assert Report.model_validate_json(text) == report
    data = json.loads(text)
    unsure, sure, unassessed = data["results"][:3]
    assert (unsure["confident"], unsure["confidence"]) == (False, 0.62)
    assert unsure["not_sure"] == "P(supported)=0.62, below the 0.81 needed"
    assert unsure["verdict"]["findings"] == [{
        "kind": "number", "veto": True, "passage_id": "ada-9#3", "claim_says": "2",
        "passage_says": "10", "reason": "the claim says <script>2</script>; the passage says 10"}]
    assert (sure["confident"], sure["confidence"], sure["not_sure"]) == (True, 0.93, None)
    assert unassessed["confident"] is None and unassessed["verdict"]["findings"] == []
    assert data["metrics"]["confident"] == {"FACT": 1, "HALLUCINATION": 0, "JUDGMENT_ERROR": 0,
                                            "COVERAGE_GAP": 0, "ERROR": 0}
    assert json.loads(report_to_json(example_report()))["metrics"]["confident"] == {}


def test_schema_names_the_not_sure_fields() -> None:
    defs = json.loads(report_json_schema())["$defs"]
    assert {"confident", "confidence", "not_sure"} <= set(defs["ClaimResult"]["properties"])
    assert {"confident", "confidence", "not_sure", "findings"} <= set(
        defs["Verdict"]["properties"])
    assert "confident" in defs["Metrics"]["properties"] and "CheckFinding" in defs
