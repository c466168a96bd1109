"""The decomposer registry: plugin group, ``factory(config, model)`` factories, create."""

from __future__ import annotations

import pytest

from medverify.config import Config
from medverify.decompose import (
    DECOMPOSERS,
    LLMDecomposer,
    RuleDecomposer,
)
from medverify.errors import ConfigError
from medverify.llm.facade import Model
from medverify.testing import ScriptedProvider


def test_registry_reads_the_decomposers_entry_point_group() -> None:
    assert DECOMPOSERS.group == "medverify.decomposers"
    assert DECOMPOSERS.plugin("rules") is None and DECOMPOSERS.plugin("llm") is None


def test_factories_take_config_and_model() -> None:
    model = Model(ScriptedProvider([]))
    assert isinstance(DECOMPOSERS.get("rules")(Config(), None), RuleDecomposer)
    assert isinstance(DECOMPOSERS.get("rules")(None, model), RuleDecomposer)
    llm = DECOMPOSERS.get("llm")(Config(), model)
    assert isinstance(llm, LLMDecomposer) and llm.model is model
    with pytest.raises(ConfigError, match="the 'llm' decomposer needs a model: pass --model"):
        DECOMPOSERS.get("llm")(Config(), None)


def test_create_takes_the_config_and_the_model() -> None:
    config = Config()
    assert isinstance(DECOMPOSERS.create(config.decomposer_name, config), RuleDecomposer)
    assert isinstance(DECOMPOSERS.create("rules", config, None), RuleDecomposer)
    with pytest.raises(ConfigError, match="needs a model"):
        DECOMPOSERS.create("llm", config)
