"""The real-data mechanism of :mod:`data_paths`, run as pytest runs it: a small test tree in
a child pytest with ``MEDVERIFY_DATA`` pointing at a missing, an empty and a filled folder,
with and without ``CI=true``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from data_paths import ENV as DATA_ENV
from data_paths import ROOT

TESTS = Path(__file__).resolve().parent

CONFTEST = """
from data_paths import pytest_runtest_call, pytest_runtest_setup, pytest_terminal_summary
"""

TINY = """
import pytest
from data_paths import data_files, data_path


@pytest.mark.data("a/present.txt")
def test_marked():
    assert data_path("a/present.txt").read_text() == "x"


@pytest.mark.data("raw/*.json")
@pytest.mark.parametrize("path", data_files("raw/*.json"), ids=lambda p: p.name)
def test_each_file(path):
    assert path.read_text() == "{}"


def test_without_data():
    pass
"""


UNDECLARED = """
import pytest
from data_paths import data_path


def test_reads_without_a_marker():
    data_path("a/present.txt").read_text()


@pytest.mark.data("a/present.txt")
def test_reads_another_file_than_declared():
    data_path("raw/one.json").read_text()


@pytest.fixture
def loaded():
    return data_path("raw/two.json").read_text()


def test_reads_in_a_fixture(loaded):
    pass


@pytest.mark.data("a")
def test_reads_under_a_declared_folder():
    assert data_path("a/present.txt").read_text() == "x"
    assert sorted(p.name for p in data_path("raw").parent.glob("a/*")) == ["present.txt"]
"""


def run_tree(tmp_path: Path, data: str, *, ci: bool,
             tiny: str = TINY) -> subprocess.CompletedProcess[str]:
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    (tree / "pytest.ini").write_text("[pytest]\nmarkers =\n    data: needs real data\n")
    (tree / "conftest.py").write_text(CONFTEST)
    (tree / "test_tiny.py").write_text(tiny)
    env = {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith("MEDVERIFY_")}
    env.update(PYTHONPATH=str(TESTS), MEDVERIFY_DATA=data, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--strict-markers", "-p", "no:cacheprovider",
         "-o", "addopts=", "-c", str(tree / "pytest.ini"), str(tree)],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_missing_folder_skips_with_the_reason_grouped_in_the_summary(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = run_tree(tmp_path, str(missing), ci=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 2 skipped" in result.stdout
    assert "2 skipped, by reason" in result.stdout
    assert f"    2  no data folder at {missing} (set MEDVERIFY_DATA)" in result.stdout
    assert "test_tiny.py (2)" in result.stdout


def test_missing_files_under_ci_fail(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_tree(tmp_path, str(empty), ci=False)
    assert result.returncode == 0 and "1 passed, 2 skipped" in result.stdout, result.stdout
    assert f"a/present.txt not found in {empty}" in result.stdout
    assert f"nothing matches raw/*.json in {empty}" in result.stdout
    under_ci = run_tree(tmp_path, str(empty), ci=True)
    assert under_ci.returncode == 1, under_ci.stdout
    assert "1 passed, 2 errors" in under_ci.stdout and "skipped" not in under_ci.stdout
    assert "CI=true and the test data is missing: a/present.txt not found" in under_ci.stdout
    no_folder = run_tree(tmp_path, str(tmp_path / "nowhere"), ci=True)
    assert no_folder.returncode == 1 and "2 errors" in no_folder.stdout, no_folder.stdout


def filled_data(tmp_path: Path) -> Path:
    """A data folder holding a/present.txt and raw/one.json, raw/two.json."""
    data = tmp_path / "data"
    (data / "a").mkdir(parents=True)
    (data / "raw").mkdir()
    (data / "a" / "present.txt").write_text("x")
    for name in ("one.json", "two.json"):
        (data / "raw" / name).write_text("{}")
    return data


@pytest.mark.parametrize("ci", [False, True], ids=["local", "ci"])
def test_present_data_runs_every_test(tmp_path: Path, ci: bool) -> None:
    data = filled_data(tmp_path)
    relative = os.path.relpath(data, ROOT)  # a relative MEDVERIFY_DATA is from the repo root
    result = run_tree(tmp_path, relative, ci=ci)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 passed" in result.stdout and "skipped" not in result.stdout


def test_reading_data_without_declaring_it_fails(tmp_path: Path) -> None:
    """The audit hook: a test (or its fixture) that opens a data file its markers do not
    name fails with the path, even where the file is there."""
    data = filled_data(tmp_path)
    result = run_tree(tmp_path, str(data), ci=False, tiny=UNDECLARED)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "2 failed, 1 passed, 1 error" in result.stdout, result.stdout
    for path in ("a/present.txt", "raw/one.json", "raw/two.json"):
        assert f"the test read {path} from the data folder" in result.stdout, result.stdout


def test_the_library_follows_medverify_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            ) -> None:
    """The library's own default data paths (trial samples, the train commands' folders)
    follow ``MEDVERIFY_DATA`` as the tests do; ``MEDVERIFY_TRIALS_SAMPLES`` still overrides."""
    from medverify.files import data_dir
    from medverify.trials.synthetic import SAMPLES_ENV, default_samples_dir

    monkeypatch.delenv(DATA_ENV, raising=False)
    assert data_dir() == ROOT.parent / "shared" / "data"
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert data_dir() == tmp_path
    assert default_samples_dir() == tmp_path / "raw" / "clinicaltrials"
    monkeypatch.setenv(SAMPLES_ENV, str(tmp_path / "mine"))
    assert default_samples_dir() == tmp_path / "mine"
