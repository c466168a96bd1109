"""The judge seam: decide, for each claim, whether its evidence supports it (factual
analysis) and whether it supports its negation (counterfactual analysis).

A judge implements one method, ``judge(items) -> verdicts`` (one Verdict per item, same
order). A judge never raises for one bad item: it returns a Verdict with ``error`` set.

Judges are named in :data:`JUDGES` (``llm``, ``llm-scored``, ``builtin``, ``cascade`` and
those of installed plugins, entry-point group ``medverify.judges``);
:func:`judge_from_config` makes the configured one. See docs/plugins.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from medverify.config import Config
from medverify.errors import ConfigError, MedverifyError
from medverify.records import Claim, Passage, Verdict
from medverify.registry import Registry, load_attr

if TYPE_CHECKING:
    from medverify.llm.facade import Model


class JudgeItem(BaseModel):
    """One claim with the evidence it is to be judged against."""

    model_config = ConfigDict(extra="forbid")

    claim: Claim
    passages: list[Passage]


@runtime_checkable
class Judge(Protocol):
    name: str
    prompt_version: str | None

    async def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]: ...


_BUILTIN = {
    "llm": "medverify.judge.llm:LLMJudge",
    "builtin": "medverify.judge.builtin:BuiltinJudge",
    "cascade": "medverify.judge.cascade:CascadeJudge",
    "llm-scored": "medverify.judge.llm_scored:ScoredLLMJudge",
}

JUDGES: Registry[Judge] = Registry("judge", group="medverify.judges")
"""Judge factories by name, each called as ``factory(config, model)`` (``model``: the
configured :class:`~medverify.llm.facade.Model`, or None). Plugins add names through the
``medverify.judges`` entry-point group (see docs/plugins.md)."""
for _name, _target in _BUILTIN.items():
    JUDGES.register(_name, f"{_target}.from_config")
del _name, _target


def model_required(name: str) -> ConfigError:
    """The error of a judge that needs a model and was given none."""
    return ConfigError(
        f"the {name} judge needs a model: pass --model SPEC (or use --judge builtin, "
        "which runs offline)"
    )


def judge_from_config(config: Config, model: Model | None, name: str | None = None) -> Judge:
    """The judge registered as ``name`` (default ``config.judge_name``), made from the
    config and the model (None when no model is configured).

    Raises :class:`ConfigError` for an unknown name (listing the known ones), for a judge
    that needs a model and has none, and for a plugin that fails to load, fails to build its
    judge or returns something that is not a :class:`Judge`."""
    name = name or config.judge_name
    factory = JUDGES.get(name)
    plugin = JUDGES.plugin(name)
    if plugin is None:
        return factory(config, model)
    try:
        judge = factory(config, model)
    except MedverifyError:
        raise
    except Exception as exc:
        raise ConfigError(f"judge {name!r} from plugin {plugin} failed: "
                          f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(judge, Judge):
        raise ConfigError(
            f"judge {name!r} from plugin {plugin} made a {type(judge).__name__}, which is not "
            "a judge (it needs name, prompt_version and an async judge(items) method)"
        )
    return judge


def make_judge(name: str, **options: Any) -> Judge:
    """Create a judge by registry name from constructor options (prefer
    :func:`judge_from_config`).

    A built-in judge (``llm``, ``builtin``, ``cascade``) gets ``options`` as constructor
    keywords (e.g. ``model=``); a plugin judge is made by its factory from the options
    ``config`` and ``model`` (what :func:`judge_options` gives for it), other options are
    the built-in judges' and are not passed on."""
    if name not in JUDGES.names():
        raise ConfigError(f"judge {name!r} is not available; known: {JUDGES.names()}")
    if name not in _BUILTIN:
        return judge_from_config(options.get("config") or Config(), options.get("model"), name)
    cls = load_attr(_BUILTIN[name])
    if getattr(cls, "needs_model", False) and options.get("model") is None:
        raise model_required(name)
    return cls(**options)  # type: ignore[no-any-return]


def judge_options(name: str, config: Config, model: Model | None) -> dict[str, Any]:
    """Constructor options of judge ``name`` from the config (and the model, if any), for
    :func:`make_judge`; a plugin judge's options are ``config`` and ``model``."""
    if name not in _BUILTIN:
        return {"config": config, "model": model}
    return load_attr(_BUILTIN[name]).config_options(config, model)  # type: ignore[no-any-return]
