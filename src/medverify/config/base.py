"""The base of every group of settings, and the defaults other settings derive from."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"


def home() -> Path:
    """medverify's home directory (run store, request cache): ``$MEDVERIFY_HOME`` or
    ``~/.medverify``."""
    return Path(os.environ.get("MEDVERIFY_HOME") or Path.home() / ".medverify")


class Section(BaseModel):
    """A group of settings: an unknown key is an error, never silently ignored."""

    model_config = ConfigDict(extra="forbid")
