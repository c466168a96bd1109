"""Model spec strings: ``PROVIDER:MODEL[@BASE_URL][?OPTION=VALUE&...]``.

Examples::

    openai:gpt-4o-mini
    vllm:meta-llama/Llama-3.1-8B-Instruct@http://gpu-box:8000/v1
    ollama:llama3.1:8b
    llamacpp:qwen2.5-7b@http://localhost:8080/v1?timeout=120
    openai-compatible:my-model@https://llm.example.org/v1?key_env=EXAMPLE_KEY&concurrency=4
    fake:judge

``PROVIDER`` is everything before the first ``:``; ``MODEL`` runs to the first ``@`` (so
Ollama tags such as ``llama3.1:8b`` and Hugging Face names with ``/`` work); the optional
query part holds options: ``key_env`` (name of the environment variable with the API key),
``timeout`` (seconds per attempt), ``budget`` (seconds per call, all attempts: ``[llm]
call_budget_s``), ``concurrency`` and ``retries``. A spec never holds a key itself.

Providers are looked up by name in :data:`providers`; built-ins register there the same way
plugins do (``providers.register("name", factory)``, factory ``(ModelSpec, ModelSettings) ->
Provider``); installed packages add providers through the ``medverify.providers`` entry-point
group (see docs/plugins.md). ``providers.create(spec.provider, spec, settings)`` makes one.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from medverify.config import ModelSettings
from medverify.errors import ConfigError
from medverify.llm.base import Provider
from medverify.registry import Registry

_PROVIDER_RE = re.compile(r"[a-z][a-z0-9_-]*")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPTION_FIELDS = {"key_env": "key_env", "timeout": "timeout_s", "budget": "call_budget_s",
                  "concurrency": "concurrency", "retries": "max_retries"}
_OVERRIDES = ("timeout_s", "call_budget_s", "concurrency", "max_retries")


class ProviderRegistry(Registry[Provider]):
    """Model provider factories by spec prefix, each called as ``factory(spec, settings)``."""

    def create(self, name: str, spec: ModelSpec, settings: ModelSettings) -> Provider:
        """The provider ``name`` for the parsed ``spec`` with ``settings``."""
        return self.build(name, spec, settings)


providers = ProviderRegistry(
    "model provider", group="medverify.providers", protocol=Provider,
    needs="it needs an id and an async complete(request) method")
"""Provider factories by spec prefix: ``providers.create(name, spec, settings)``; plugins
add names through the ``medverify.providers`` entry-point group."""

for _kind in ("openai", "vllm", "ollama", "llamacpp", "lmstudio", "openai-compatible"):
    providers.register(_kind, "medverify.llm.openai_compat:from_spec")
providers.register("fake", "medverify.testing.fake_provider:from_spec")
providers.register("local", "medverify.llm.local:from_spec")  # in-process, prepared models


class ModelSpec(BaseModel):
    """A parsed model spec. ``str(spec)`` gives back the canonical spec string."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str
    model: str = Field(min_length=1)
    base_url: str | None = None
    key_env: str | None = None
    timeout_s: float | None = Field(None, gt=0)
    call_budget_s: float | None = Field(None, ge=0)
    concurrency: int | None = Field(None, ge=1)
    max_retries: int | None = Field(None, ge=0)

    def apply(self, settings: ModelSettings | None = None) -> ModelSettings:
        """``settings`` with this spec's per-model overrides (timeout, budget, concurrency,
        retries)."""
        base = settings or ModelSettings()
        update = {name: getattr(self, name) for name in _OVERRIDES
                  if getattr(self, name) is not None}
        if (self.timeout_s is not None and self.call_budget_s is None
                and 0 < base.call_budget_s < self.timeout_s):
            update["call_budget_s"] = self.timeout_s  # ?timeout=120 gets one whole attempt
        return base.model_copy(update=update)

    def __str__(self) -> str:
        text = f"{self.provider}:{self.model}"
        if self.base_url:
            text += f"@{self.base_url}"
        options = [f"{opt}={_format(getattr(self, field))}"
                   for opt, field in _OPTION_FIELDS.items() if getattr(self, field) is not None]
        return text + ("?" + "&".join(options) if options else "")


def _format(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def parse_spec(text: str) -> ModelSpec:
    """Parse a spec string; raises :class:`ConfigError` saying what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("empty model spec; expected PROVIDER:MODEL, e.g. openai:gpt-4o-mini")
    text = text.strip()
    provider, sep, rest = text.partition(":")
    if not sep or not rest:
        raise ConfigError(f"model spec {text!r} has no model name; expected PROVIDER:MODEL, "
                          "e.g. openai:gpt-4o-mini or ollama:llama3.1")
    if not _PROVIDER_RE.fullmatch(provider):
        raise ConfigError(f"model spec {text!r}: bad provider name {provider!r}")
    rest, _, query = rest.partition("?")
    model, at, base_url = rest.partition("@")
    fields: dict[str, Any] = {"provider": provider, "model": model.strip(),
                              **_parse_options(text, query)}
    if at:
        fields["base_url"] = _check_base_url(text, base_url)
    if not fields["model"] or any(ch.isspace() for ch in fields["model"]):
        raise ConfigError(f"model spec {text!r}: missing or blank model name")
    try:
        return ModelSpec(**fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"model spec {text!r}: {problems}") from None


def _parse_options(text: str, query: str) -> dict[str, str]:
    if not query:
        return {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise ConfigError(f"model spec {text!r}: cannot read options {query!r}; "
                          "expected ?name=value&name=value") from None
    options: dict[str, str] = {}
    for name, value in pairs:
        options[_option_field(text, name, options)] = value
    if "key_env" in options and not _ENV_NAME_RE.fullmatch(options["key_env"]):
        raise ConfigError(f"model spec {text!r}: key_env must be the NAME of an environment "
                          "variable holding the key (e.g. key_env=MY_API_KEY), not the key")
    return options


def _option_field(text: str, name: str, seen: dict[str, str]) -> str:
    if name in ("key", "api_key", "apikey", "token"):
        raise ConfigError(f"model spec {text!r}: never put an API key in a spec; store it in an "
                          "environment variable and name it with key_env=VAR")
    if name not in _OPTION_FIELDS:
        known = ", ".join(_OPTION_FIELDS)
        raise ConfigError(f"model spec {text!r}: unknown option {name!r}; known: {known}")
    field = _OPTION_FIELDS[name]
    if field in seen:
        raise ConfigError(f"model spec {text!r}: option {name!r} given twice")
    return field


def _check_base_url(text: str, url: str) -> str:
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"model spec {text!r}: base URL {url!r} must look like "
                          "http://host:port/v1")
    if parts.username or parts.password:
        raise ConfigError(f"model spec {text!r}: do not put credentials in the base URL; "
                          "use key_env=VAR")
    return url.rstrip("/")
