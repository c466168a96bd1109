"""Loads a module of ``scripts/`` (import_graph, shape) for the tests that check the
source's layering and shape."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(stem: str) -> ModuleType:
    """``scripts/<stem>.py`` as the module ``medverify_<stem>`` (loaded once)."""
    name = f"medverify_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{stem}.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]
