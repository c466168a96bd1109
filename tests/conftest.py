from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chromium_browser import browser  # noqa: F401 (fixture)
from postgres_server import pg_cluster, pg_url, store_location  # noqa: F401 (fixtures)
from ray_cluster import ray_executor  # noqa: F401 (fixture)

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "mv-home"
    monkeypatch.setenv("MEDVERIFY_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    for key in list(__import__("os").environ):
        if key.startswith("MEDVERIFY_") and key != "MEDVERIFY_HOME":
            monkeypatch.delenv(key)
    yield home


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not available")
    return SHARED_DATA

