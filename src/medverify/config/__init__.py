"""One typed configuration object.

Precedence: defaults < TOML file (``--config`` or ``$MEDVERIFY_HOME/config.toml``) <
environment (``MEDVERIFY_<FIELD>``, nested with ``__``, e.g. ``MEDVERIFY_LLM__TIMEOUT_S``)
< explicit overrides (CLI flags). Secrets are never stored here: a model spec names the
environment variable that holds the key, resolved at first use.

The groups of settings live in the modules of this package (:mod:`.pipeline`, :mod:`.flows`,
:mod:`.arbitration`, :mod:`.service`); every one is importable from here, the place the docs
name.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator

from medverify.config.arbitration import ARBITRATION_RULES, ArbitrationPolicy
from medverify.config.base import DEFAULT_EMBEDDER, Section, home
from medverify.config.flows import (
    AnswerSettings,
    AuditSettings,
    BenchSettings,
    FactCheckSettings,
    FetchSettings,
    RiskSettings,
    TrialStudySettings,
)
from medverify.config.pipeline import JudgeSettings, KBSettings, ModelSettings, RetrievalSettings
from medverify.config.service import DRIFT_RATES, OpsSettings, ReviewSettings, ServiceSettings
from medverify.connections import dialect_of, display, sqlite_path
from medverify.errors import ConfigError

__all__ = [
    "ARBITRATION_RULES",
    "DEFAULT_EMBEDDER",
    "DRIFT_RATES",
    "AnswerSettings",
    "ArbitrationPolicy",
    "AuditSettings",
    "BenchSettings",
    "Config",
    "FactCheckSettings",
    "FetchSettings",
    "JudgeSettings",
    "KBSettings",
    "ModelSettings",
    "OpsSettings",
    "RetrievalSettings",
    "ReviewSettings",
    "RiskSettings",
    "ServiceSettings",
    "TrialStudySettings",
    "home",
]


class Config(Section):
    """Everything a check needs to know besides its input."""

    model: str | None = None
    judge: str | None = None
    decomposer: str | None = None
    kb: Path | None = None
    max_answer_chars: int = Field(200_000, ge=1)
    max_claims: int = Field(200, ge=1)
    claims_per_call: int = Field(4, ge=1)
    # the run store (runs, jobs, keys, review queue) and the LLM request cache: a file, or a
    # URL: sqlite:///PATH, or postgresql://USER:PASSWORD@HOST:PORT/DB for a database that
    # several processes or machines share (docs/scale.md)
    store: Path | str | None = None
    cache_path: Path | str | None = None
    llm: ModelSettings = Field(default_factory=ModelSettings)
    kb_settings: KBSettings = Field(default_factory=KBSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    judge_settings: JudgeSettings = Field(default_factory=JudgeSettings)
    fetch: FetchSettings = Field(default_factory=FetchSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    bench: BenchSettings = Field(default_factory=BenchSettings)
    trials: TrialStudySettings = Field(default_factory=TrialStudySettings)
    answer: AnswerSettings = Field(default_factory=AnswerSettings)
    factcheck: FactCheckSettings = Field(default_factory=FactCheckSettings)
    risk: RiskSettings = Field(default_factory=RiskSettings)
    service: ServiceSettings = Field(default_factory=ServiceSettings)
    arbitration: ArbitrationPolicy = Field(default_factory=ArbitrationPolicy)
    review: ReviewSettings = Field(default_factory=ReviewSettings)
    ops: OpsSettings = Field(default_factory=OpsSettings)

    @property
    def judge_name(self) -> str:
        """``llm`` when a model is configured, else ``builtin``."""
        return self.judge or ("llm" if self.model else "builtin")

    @property
    def decomposer_name(self) -> str:
        return self.decomposer or ("llm" if self.model else "rules")

    @field_validator("store", "cache_path", mode="plain")
    @classmethod
    def _location(cls, value: Any) -> Path | str | None:
        """A path stays a path; a URL stays text (its scheme checked here)."""
        if value is None or isinstance(value, Path):
            return value
        if not isinstance(value, str):
            raise ValueError(f"a path or a URL, not {type(value).__name__}")
        if "://" not in value:
            return Path(value)
        dialect_of(value)  # ValueError for an unknown scheme
        return value

    @property
    def store_location(self) -> Path | str:
        """Where the run store is: a SQLite file (default ``$MEDVERIFY_HOME/runs.db``) or a
        database URL."""
        return self.store or home() / "runs.db"

    @property
    def store_path(self) -> Path:
        """The run store's file (ConfigError when the store is a database server)."""
        location = self.store_location
        if dialect_of(location) != "sqlite":
            raise ConfigError(f"the run store is a database server ({display(location)}), "
                              "not a file")
        return sqlite_path(location)

    @property
    def local_dir(self) -> Path:
        """Where this machine keeps files beside the run store: the SQLite file's folder,
        or ``$MEDVERIFY_HOME`` when the store is a database server."""
        location = self.store_location
        return sqlite_path(location).parent if dialect_of(location) == "sqlite" else home()

    @property
    def request_cache_path(self) -> Path | str:
        """The LLM request cache: a SQLite file (default ``$MEDVERIFY_HOME/cache.db``) or a
        database URL."""
        return self.cache_path or home() / "cache.db"

    @property
    def fetch_cache_path(self) -> Path:
        return self.fetch.cache_path or home() / "fetch-cache.db"

    @classmethod
    def load(
        cls, path: Path | None = None, *, env: dict[str, str] | None = None, **overrides: Any
    ) -> Config:
        """Build a config from defaults, file, environment and overrides (in that order)."""
        data: dict[str, Any] = {}
        file = path or home() / "config.toml"
        if path is not None and not file.exists():
            raise ConfigError(f"config file not found: {file}")
        if file.exists():
            try:
                data = tomllib.loads(file.read_text("utf-8"))
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read config file {file}: {exc}") from exc
        _merge(data, _from_env(os.environ if env is None else env))
        _merge(data, {k: v for k, v in overrides.items() if v is not None})
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}"
                                 for e in exc.errors()[:3])
            raise ConfigError(f"invalid configuration: {problems}") from exc

    def public(self) -> dict[str, Any]:
        """The config as recorded in the run store (no secrets are ever held here)."""
        return self.model_dump(mode="json")


_NOT_SETTINGS = {"MEDVERIFY_HOME", "MEDVERIFY_SERVE_CONFIG", "MEDVERIFY_DATA",
                 "MEDVERIFY_CHROMIUM", "MEDVERIFY_VERIFIER_BASE", "MEDVERIFY_LLAMACPP_PYTHON",
                 "MEDVERIFY_TRIALS_SAMPLES", "MEDVERIFY_VERIFIER_SCORING",
                 "MEDVERIFY_ONNX_CACHE", "MEDVERIFY_LOCAL_DTYPE"}
"""MEDVERIFY_ variables that are not settings: the home folder, the config ``medverify
serve`` hands its worker processes, the paths the tests and benchmarks read (the real
data, Chromium, the verifier base model, llama.cpp's Python, the trial samples), and what
is read where a model is loaded (the verifier's arithmetic, the ONNX export cache, the local
LLM's dtype)."""


def _from_env(env: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in env.items():
        if not key.startswith("MEDVERIFY_") or key in _NOT_SETTINGS:
            continue
        path = key[len("MEDVERIFY_") :].lower().split("__")
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
