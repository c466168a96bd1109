"""Chromium for the ``browser`` tests: the ``browser`` fixture launches Debian's Chromium
(``$MEDVERIFY_CHROMIUM``, else ``chromium`` on PATH, else /usr/bin/chromium) headless
through Playwright, once per module, and skips when it is absent (``apt-get install
chromium``). A test module imports the fixture after its ``importorskip`` of Playwright."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = (os.environ.get("MEDVERIFY_CHROMIUM") or shutil.which("chromium")
            or "/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                              args=["--no-sandbox"])
        yield launched
        launched.close()
