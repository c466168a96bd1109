"""The standing fault suite: kill -9 and resume, parser fuzzing, corrupted files, injection.

Every test under ``tests/faults/`` is marked ``faults``: the default ``pytest`` run leaves
them out (it must stay well under two minutes) and ``.ci/run`` runs them with
``pytest -m faults`` (``make test-faults``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.faults)
