"""The shipped Prometheus files (examples/prometheus) checked by Prometheus's own promtool
(issue 43): the alert rules pass ``check rules``, the sample config passes ``check config``
as shipped (with its key file created beside it, as docs/operations.md says), and every
``tests/*.test.yml`` passes ``promtool test rules``. Without promtool these skip (fail under
``CI=true``); that every alert has a unit test, that each test loads the shipped rules, and
that the config reads its key file beside it are checked without promtool."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from promtool_runner import EXAMPLES, run_promtool

RULES = EXAMPLES / "alerts.yml"
UNIT_TESTS = sorted((EXAMPLES / "tests").glob("*.test.yml"))
KEY_FILE = "medverify-admin.key"


def alerts() -> dict[str, dict[str, Any]]:
    """The shipped alert rules by name."""
    groups = yaml.safe_load(RULES.read_text("utf-8"))["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]
            if "alert" in rule}


def alerts_tested_in(path: Path) -> set[str]:
    """The alert names a promtool unit test file checks."""
    spec = yaml.safe_load(path.read_text("utf-8"))
    return {case["alertname"] for test in spec.get("tests", [])
            for case in test.get("alert_rule_test", [])}


def test_every_alert_has_a_unit_test_and_every_test_loads_the_shipped_rules() -> None:
    assert len(UNIT_TESTS) >= 1
    covered: set[str] = set()
    for path in UNIT_TESTS:
        spec = yaml.safe_load(path.read_text("utf-8"))
        assert [(path.parent / f).resolve() for f in spec["rule_files"]] == [RULES], path
        covered |= alerts_tested_in(path)
    assert set(alerts()) - covered == set(), "alerts without a promtool unit test"
    assert covered - set(alerts()) == set(), "unit tests of alerts that are not shipped"


def test_the_sample_config_loads_the_rules_and_reads_its_key_beside_it() -> None:
    config = yaml.safe_load((EXAMPLES / "prometheus.yml").read_text("utf-8"))
    assert config["rule_files"] == ["alerts.yml"]
    [job] = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["authorization"] == {"type": "Bearer", "credentials_file": KEY_FILE}


@pytest.mark.promtool
def test_the_alert_rules_pass_check_rules() -> None:
    result = run_promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


@pytest.mark.promtool
def test_the_shipped_config_passes_check_config_once_its_key_file_exists(
        tmp_path: Path) -> None:
    folder = tmp_path / "prometheus"
    shutil.copytree(EXAMPLES, folder)
    missing = run_promtool("check", "config", "prometheus.yml", cwd=folder)
    assert missing.returncode != 0 and KEY_FILE in missing.stdout + missing.stderr
    (folder / KEY_FILE).write_text("mvk_placeholder_secret\n", "utf-8")
    result = run_promtool("check", "config", "prometheus.yml", cwd=folder)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout


@pytest.mark.promtool
@pytest.mark.parametrize("path", UNIT_TESTS, ids=[p.name for p in UNIT_TESTS])
def test_the_alert_unit_tests_pass(path: Path) -> None:
    result = run_promtool("test", "rules", path.name, cwd=path.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.promtool
def test_the_unit_tests_fail_without_the_for_durations(tmp_path: Path) -> None:
    """Each test of an alert with ``for:`` checks it: with the durations struck from a copy
    of the rules, the test file fails (the alert fires early)."""
    folder = tmp_path / "prometheus"
    shutil.copytree(EXAMPLES, folder)
    text = (folder / "alerts.yml").read_text("utf-8")
    (folder / "alerts.yml").write_text(re.sub(r"(?m)^\s+for: \S+\n", "", text), "utf-8")
    waiting = {name for name, rule in alerts().items() if "for" in rule}
    for path in UNIT_TESTS:
        if not alerts_tested_in(path) & waiting:
            continue
        result = run_promtool("test", "rules", path.name, cwd=folder / "tests")
        assert result.returncode != 0, f"{path.name} passes without the for: durations"
