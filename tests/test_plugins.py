"""A real plugin package, installed with pip into a temporary directory and used from the real
CLI in a subprocess: its judge and decomposer are offered by ``--help`` and do the work.

The plugin is tests/plugins/medverify_plugin_demo (the worked example of docs/plugins.md).
Installing needs no network: no build isolation, no dependencies, no index.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from medverify.kb import KnowledgeBase
from medverify.records import Document

PLUGIN = Path(__file__).parent / "plugins" / "medverify_plugin_demo"

ANSWER = "The flu vaccine is recommended every year. It is needed only every ten years."


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo plugin installed (pip --target) into a temporary directory."""
    root = tmp_path_factory.mktemp("plugin")
    source = root / "src"  # a copy: building writes build/ and *.egg-info beside the source
    shutil.copytree(PLUGIN, source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = root / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-build-isolation", "--no-deps", "--no-index", "--no-cache-dir",
         "--target", str(target), str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert any(target.glob("medverify_plugin_demo-*.dist-info/entry_points.txt"))
    return target


def _medverify(plugin_path: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = [str(plugin_path), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    return subprocess.run([sys.executable, "-m", "medverify", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300, check=False)


def test_plugin_names_are_offered_by_the_cli(plugin_path: Path, tmp_path: Path) -> None:
    done = _medverify(plugin_path, "check", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    choices = dict(re.findall(r"(--judge|--decomposer) \[([^\]]+)\]", done.stdout))
    assert {"always-nei", "builtin", "llm"} <= set(choices["--judge"].split("|"))
    assert {"one-per-sentence", "rules", "llm"} <= set(choices["--decomposer"].split("|"))


def test_plugin_judge_and_decomposer_check_an_answer(plugin_path: Path, tmp_path: Path) -> None:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="flu", title="Influenza", text=(
            "Influenza vaccination is recommended every year for people aged 6 months and "
            "older."))])
    (tmp_path / "answer.txt").write_text(ANSWER)
    done = _medverify(plugin_path, "check", "answer.txt", "--kb", "kb", "--judge", "always-nei",
                      "--decomposer", "one-per-sentence", "--json", "report.json",
                      "--no-record", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    results = report["results"]
    assert [r["claim"]["text"] for r in results] == [
        "The flu vaccine is recommended every year.",
        "It is needed only every ten years.",
    ]
    assert {r["claim"]["decomposer"] for r in results} == {"one-per-sentence"}
    assert {r["verdict"]["judge"] for r in results} == {"always-nei"}
    assert {r["category"] for r in results} == {"COVERAGE_GAP"}
    assert all(r["passages"] for r in results), "the claims were judged against KB passages"
    assert "COVERAGE_GAP" in done.stdout + done.stderr


def test_unknown_judge_is_refused_with_the_known_names(plugin_path: Path, tmp_path: Path) -> None:
    done = _medverify(plugin_path, "check", "-", "--judge", "nope", cwd=tmp_path)
    assert done.returncode == 2
    assert "'nope' is not one of" in done.stderr and "'always-nei'" in done.stderr
