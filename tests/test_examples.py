"""The offline examples in examples/ run end to end (small settings)."""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _main(script: str) -> object:
    return runpy.run_path(str(ROOT / "examples" / script), run_name="example")["main"]


STUDY_ARGS = ["--judge", "word", "--medquad", "0"]


@pytest.fixture(scope="module")
def whole_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One whole run of the bench example and what it printed, built once for the module;
    each test works on its own copy (``_copy``)."""
    out = tmp_path_factory.mktemp("whole") / "study"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert _main("bench_offline/run_study.py")(["--out", str(out), *STUDY_ARGS]) == 0  # type: ignore[operator]
    return out, printed.getvalue()


def _copy(study: Path, tmp_path: Path) -> Path:
    out = tmp_path / "study"
    shutil.copytree(study, out)
    return out


def test_bench_example_runs_the_whole_study(whole_study: tuple[Path, str],
                                            tmp_path: Path) -> None:
    out = _copy(whole_study[0], tmp_path)
    summary = json.loads((out / "summary.json").read_text("utf-8"))
    assert [m["label"] for m in summary["models"]] == [
        "citer-careful", "citer-overreaching", "citer-hallucinating", "citer-freetext",
        "citer-unreliable"]
    overall = summary["overall"]
    assert overall["citer-careful"]["url_validity"]["value"] == 1.0
    assert overall["citer-hallucinating"]["url_validity"]["value"] == 0.0
    assert (out / "report.html").is_file() and (out / "exports" / "replies.csv").is_file()
    assert "recompute: medverify bench report" in whole_study[1]


def test_factcheck_example_corrects_both_planted_errors(tmp_path: Path) -> None:
    main = _main("factcheck_offline/run.py")
    assert main(["--out", str(tmp_path / "fc")]) == 0  # type: ignore[operator]
    html = (tmp_path / "fc" / "report.html").read_text("utf-8")
    assert "500 mg daily" in html and "severe kidney disease" in html


def test_medquad_questions_of_zero_is_empty() -> None:
    from medverify.testing.citers import medquad_questions

    assert medquad_questions(0) == [] and len(medquad_questions(3)) == 3


def _interrupt(run: Path, replies_kept: int, audits_kept: int) -> None:
    """What a kill leaves: the first replies and audits on disk, no summary yet."""
    for path, keep in ((run / "replies.jsonl", replies_kept),
                       (run / "audit" / "answers.jsonl", audits_kept)):
        lines = path.read_text("utf-8").splitlines(keepends=True)
        path.write_text("".join(lines[:keep]), "utf-8")
    (run / "summary.json").unlink()


def test_bench_example_resumed_gives_the_same_numbers(whole_study: tuple[Path, str],
                                                      tmp_path: Path) -> None:
    """Issue 13: killed and rerun, the example served its pages on a new port; the stored
    replies cited the old one and support fell (0.975 -> 0.254) without a warning."""
    main = _main("bench_offline/run_study.py")
    out = _copy(whole_study[0], tmp_path)  # a whole run (the module's), then killed
    args = ["--out", str(out), *STUDY_ARGS]
    whole = json.loads((out / "summary.json").read_text("utf-8"))
    _interrupt(out, replies_kept=40, audits_kept=20)
    moved = tmp_path / "moved"
    shutil.copytree(out, moved)
    (moved / "page_server.json").unlink()  # the old behaviour: a new port on resume

    assert main(args) == 0  # type: ignore[operator]
    resumed = json.loads((out / "summary.json").read_text("utf-8"))
    assert resumed["overall"] == whole["overall"]
    assert "fetch_changes" not in resumed["notes"]
    timing = json.loads((out / "timing.json").read_text("utf-8"))
    assert timing["replies_resumed"] == 40

    assert main(["--out", str(moved), *STUDY_ARGS]) == 0  # type: ignore[operator]
    broken = json.loads((moved / "summary.json").read_text("utf-8"))
    careful = broken["overall"]["citer-careful"]["url_validity"]["value"]
    assert careful < whole["overall"]["citer-careful"]["url_validity"]["value"]
    assert broken["notes"]["fetch_changes"]  # ... and the run says so
    assert any("different fetch outcome" in w for w in broken["notes"]["run_warnings"])


def test_trials_example_runs_the_study_on_made_up_records(tmp_path: Path) -> None:
    from medverify.testing.trial_models import make_record

    records = tmp_path / "records"
    records.mkdir()
    (records / "a.json").write_text(json.dumps(make_record("NCT90000001", "A trial")), "utf-8")
    out = tmp_path / "trials"
    main = _main("trials_offline/run_study.py")
    assert main(["--out", str(out), "--records", str(records), "--judge", "numbers",  # type: ignore[operator]
                 "--levels", "paragraph,sentence"]) == 0
    summary = json.loads((out / "summary.json").read_text("utf-8"))
    assert summary["n_trials"] == 1 and summary["granularities"] == ["paragraph", "sentence"]
    assert "Scripted models" in (out / "report.md").read_text("utf-8")
