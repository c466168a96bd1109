"""Versioned prompt files, one folder per stage: ``prompts/<stage>/<version>.md``.

A prompt file has a ``# system`` section and a ``# user`` section, and may add named
``# question NAME`` sections (:attr:`Prompt.questions`: the scored judge asks each pass's
question at the end of one shared user message, so a server or the local provider reuses
the computed prefix). Placeholders are
``{{name}}``; substitution replaces only the names given, so braces inside untrusted
text (answers, evidence) are never interpreted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from medverify.errors import ConfigError
from medverify.llm.base import Message

_SECTION = re.compile(r"^# (system|user|question [a-z_]+)\s*$", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


@dataclass(frozen=True)
class Prompt:
    stage: str
    version: str
    system: str
    user: str
    questions: dict[str, str] = field(default_factory=dict)  # "# question NAME" sections

    @property
    def id(self) -> str:
        return f"{self.stage}/{self.version}"

    def render(self, **values: str) -> list[Message]:
        return [
            Message(role="system", content=_fill(self.system, values)),
            Message(role="user", content=_fill(self.user, values)),
        ]


def _fill(template: str, values: dict[str, str]) -> str:
    missing = set(_PLACEHOLDER.findall(template)) - set(values)
    if missing:
        raise ConfigError(f"prompt placeholders without values: {sorted(missing)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def versions(stage: str) -> list[str]:
    folder = resources.files("medverify.prompts") / stage
    if not folder.is_dir():
        return []
    names = [p.name[:-3] for p in folder.iterdir() if p.name.endswith(".md")]
    return sorted(names, key=lambda v: int(v[1:]) if v[1:].isdigit() else 0)


@cache
def load_prompt(stage: str, version: str | None = None) -> Prompt:
    """Load a stage's prompt; the newest version when ``version`` is None."""
    available = versions(stage)
    if not available:
        raise ConfigError(f"no prompts for stage {stage!r}")
    version = version or available[-1]
    if version not in available:
        raise ConfigError(f"prompt {stage}/{version} not found; available: {available}")
    text = (resources.files("medverify.prompts") / stage / f"{version}.md").read_text("utf-8")
    parts = _SECTION.split(text)
    sections = {parts[i]: parts[i + 1].strip() + "\n" for i in range(1, len(parts) - 1, 2)}
    questions = {name.split(" ", 1)[1]: sections.pop(name).strip()
                 for name in list(sections) if name.startswith("question ")}
    if set(sections) != {"system", "user"}:
        raise ConfigError(f"prompt {stage}/{version} needs '# system' and '# user' sections")
    return Prompt(stage, version, sections["system"], sections["user"], questions)
