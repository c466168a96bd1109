"""The JSON schema of :class:`~medverify.records.Report`, committed as docs/report.schema.json.

Regenerate it from the repository root with ``python -m medverify.report.schema``
(or pass another output path); a test fails when the committed file is stale.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from medverify.files import atomic_write_text
from medverify.records import Report

SCHEMA_PATH = Path("docs") / "report.schema.json"


def report_json_schema() -> str:
    """The JSON schema of :class:`Report` as pretty JSON text."""
    return json.dumps(Report.model_json_schema(), indent=2, ensure_ascii=False) + "\n"


def write_report_schema(path: str | os.PathLike[str] = SCHEMA_PATH) -> Path:
    """Write the report schema to ``path`` (default ``docs/report.schema.json``)."""
    return atomic_write_text(path, report_json_schema())


if __name__ == "__main__":
    print(write_report_schema(sys.argv[1] if len(sys.argv) > 1 else SCHEMA_PATH))
