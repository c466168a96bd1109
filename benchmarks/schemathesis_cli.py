"""schemathesis's command line (``st``), run by benchmarks/bench_schemathesis.py in
schemathesis's own virtual environment, with one work-around: CPython 3.11 before 3.11.8
(gh-106905) sometimes raises ``SystemError: AST constructor recursion depth mismatch`` from
``ast.parse`` when hypothesis describes a lambda for a strategy's repr (its label), which
stopped whole runs with an error of the tool. Here that description falls back to the one
hypothesis gives a lambda whose source it cannot read (``lambda ...: <unknown>``); nothing
else changes.

Usage: .venv/schemathesis/bin/python benchmarks/schemathesis_cli.py run ... (as ``st``)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from hypothesis.internal import lambda_sources
from schemathesis.cli import schemathesis

_describe: Callable[[Any], str] = lambda_sources._lambda_description


def _lambda_description(f: Any) -> str:
    try:
        return _describe(f)
    except SystemError:  # gh-106905, CPython < 3.11.8
        return "lambda: <unknown>"


lambda_sources._lambda_description = _lambda_description

if __name__ == "__main__":
    sys.argv[0] = "st"
    sys.exit(schemathesis())
