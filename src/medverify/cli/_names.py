"""Option values that come from a registry: the built-in names plus those of installed plugins.

The registry is named as a ``"module:attr"`` string and read only when click needs its names
(``--help``, or checking a value that was given), so importing the CLI scans no entry points
and imports no backend.
"""

from __future__ import annotations

from typing import Any

import click

from medverify.registry import load_attr

JUDGES = "medverify.judge:JUDGES"
DECOMPOSERS = "medverify.decompose:DECOMPOSERS"
EMBEDDERS = "medverify.kb.embed:EMBEDDERS"
SECOND_STAGES = "medverify.judge:second_stages"  # the judges that declare second_stage


def registry_names(registry: str) -> list[str]:
    """The names of the registry at ``"module:attr"`` (sorted; plugins included), or what
    the function at ``"module:attr"`` lists (some of a registry's names, by trait)."""
    found = load_attr(registry)
    return list(found.names() if hasattr(found, "names") else found())


class RegistryChoice(click.Choice):  # type: ignore[type-arg]
    """``click.Choice`` among a registry's names, read when first needed."""

    def __init__(self, registry: str) -> None:
        self.registry = registry
        super().__init__((), case_sensitive=True)

    @property  # type: ignore[override]
    def choices(self) -> tuple[str, ...]:
        return tuple(registry_names(self.registry))

    @choices.setter
    def choices(self, value: Any) -> None:
        """Ignored: ``click.Choice.__init__`` sets the choices, here they come from the
        registry."""


class NamesHelpOption(click.Option):
    """An option whose help text lists a registry's names: ``{names}`` in ``help`` is
    replaced by them (comma-separated) when the help is shown."""

    def __init__(self, *args: Any, names_from: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.names_from = names_from
        self.help_template = self.help or ""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        self.help = self.help_template.format(names=", ".join(registry_names(self.names_from)))
        return super().get_help_record(ctx)


class RegistryEntry(click.ParamType):
    """``NAME`` or ``NAME=VALUE`` whose NAME must be one of a registry's names (``--judge
    llm-scored=local:qwen2.5-0.5b``): the value stays the string given; the name is checked
    when the option is read, like a :class:`RegistryChoice`."""

    name = "NAME[=VALUE]"

    def __init__(self, registry: str) -> None:
        self.registry = registry

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        name = str(value).strip().partition("=")[0]
        names = registry_names(self.registry)
        if name not in names:
            self.fail(f"{name!r} is not one of {', '.join(names)}", param, ctx)
        return value
