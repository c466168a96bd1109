"""The offline examples in examples/ run end to end (small settings)."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _main(script: str) -> object:
    return runpy.run_path(str(ROOT / "examples" / script), run_name="example")["main"]


def test_bench_example_runs_the_whole_study(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "study"
    main = _main("bench_offline/run_study.py")
    assert main(["--out", str(out), "--judge", "word", "--medquad", "0"]) == 0  # type: ignore[operator]
    summary = json.loads((out / "summary.json").read_text("utf-8"))
    assert [m["label"] for m in summary["models"]] == [
        "citer-careful", "citer-overreaching", "citer-hallucinating", "citer-freetext",
        "citer-unreliable"]
    overall = summary["overall"]
    assert overall["citer-careful"]["url_validity"]["value"] == 1.0
    assert overall["citer-hallucinating"]["url_validity"]["value"] == 0.0
    assert (out / "report.html").is_file() and (out / "exports" / "replies.csv").is_file()
    assert "recompute: medverify bench report" in capsys.readouterr().out


def test_factcheck_example_corrects_both_planted_errors(tmp_path: Path) -> None:
    main = _main("factcheck_offline/run.py")
    assert main(["--out", str(tmp_path / "fc")]) == 0  # type: ignore[operator]
    html = (tmp_path / "fc" / "report.html").read_text("utf-8")
    assert "500 mg daily" in html and "severe kidney disease" in html


def test_medquad_questions_of_zero_is_empty() -> None:
    from medverify.testing.citers import medquad_questions

    assert medquad_questions(0) == [] and len(medquad_questions(3)) == 3
