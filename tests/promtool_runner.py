"""Prometheus's ``promtool`` for the ``promtool`` tests: where it is
(``$MEDVERIFY_PROMTOOL``, else ``promtool`` on PATH, from Debian's ``prometheus``
package), running it, and turning a scrape of ``/metrics`` into the input series of a
``promtool test rules`` file.

Without promtool the tests skip (``apt-get install prometheus``), except under ``CI=true``,
where they fail: ``.ci/run`` installs it first, so a missing promtool there is a broken
setup (as with the data tests of :mod:`data_paths`).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from data_paths import in_ci

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "prometheus"
"""The shipped Prometheus config, alert rules and their unit tests (``tests/*.test.yml``)."""


def promtool() -> str:
    """The promtool to run; skips the test without one (fails it under ``CI=true``)."""
    found = os.environ.get("MEDVERIFY_PROMTOOL") or shutil.which("promtool")
    if found and Path(found).exists():
        return found
    reason = "no promtool (apt-get install prometheus, or set MEDVERIFY_PROMTOOL)"
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


def run_promtool(*args: str, stdin: str | None = None,
                 cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS`` with ``stdin``; its exit status and output, not checked."""
    return subprocess.run([promtool(), *args], input=stdin, capture_output=True, text=True,
                          cwd=cwd, timeout=120, check=False)


def series_of(exposition: str) -> dict[str, float]:
    """Every sample of a text exposition as a promtool series string
    (``name{label="value",...}``) with its value."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            labels = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def input_series(*scrapes: str) -> list[dict[str, str]]:
    """The scrapes as promtool input series, one scrape a minute (``interval: 1m``); a
    series missing from a scrape is ``_`` (no sample) there."""
    parsed = [series_of(text) for text in scrapes]
    names = sorted({name for samples in parsed for name in samples})
    return [{"series": name, "values": " ".join(_value(samples.get(name)) for samples in parsed)}
            for name in names]


def _value(value: float | None) -> str:
    if value is None:
        return "_"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    return repr(float(value))
