"""Registries and plugins: entry-point discovery, built-in names that cannot be replaced, broken
plugins that fail only when chosen, and the factories every group calls.

Plugins here are real entry points: a fake ``*.dist-info`` directory (METADATA and
entry_points.txt) with a module beside it, put on ``sys.path``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import medverify.checker as checker_module
import medverify.judge as judge_module
import medverify.judge.build as build_module
from medverify.cli import main
from medverify.cli._names import RegistryChoice, registry_names
from medverify.config import Config
from medverify.errors import ConfigError
from medverify.judge import JUDGES, Judge, JudgeItem
from medverify.judge import builtin as builtin_module
from medverify.judge.builtin import BuiltinJudge
from medverify.judge.cascade import CascadeJudge
from medverify.judge.llm import LLMJudge
from medverify.kb import KnowledgeBase
from medverify.kb import embed as embed_module
from medverify.kb.embed import EMBEDDERS, get_embedder
from medverify.llm import facade
from medverify.llm.spec import providers
from medverify.records import Claim, Document
from medverify.registry import Registry, load_attr
from medverify.testing import ScriptedProvider
from medverify.testing.judge import keyword_rule, scripted_judge
from medverify.testing.verifier import LexicalVerifier

_COUNTER = itertools.count()

PLUGIN_CODE = '''
from medverify.records import Analysis, Verdict


class NoJudge:
    """Says nothing holds."""

    name = "nothing"
    prompt_version = None

    def __init__(self, config, model):
        self.config, self.model = config, model

    @classmethod
    def from_config(cls, config, model):
        return cls(config, model)

    async def judge(self, items):
        no = Analysis(holds=False, reason="plugin")
        return [Verdict(claim_id=i.claim.id, factual=no, counterfactual=no, judge="nothing")
                for i in items]


def failing(config, model):
    raise ValueError("the plugin is misconfigured")


def not_a_judge(config, model):
    return 42


class Echo:
    """A provider that never answers."""

    def __init__(self, spec, settings):
        self.id = f"echo:{spec.model}"
        self.settings = settings

    async def complete(self, request):
        raise NotImplementedError


class OnesEmbedder:
    id = "ones"
    dim = 3
    tokenizer = None

    def embed(self, texts):
        import numpy as np
        return np.ones((len(texts), 3), dtype=np.float32) / 3 ** 0.5
'''


def install_plugin(
    root: Path, monkeypatch: pytest.MonkeyPatch, entry_points: dict[str, dict[str, str]],
    *, dist: str = "demo-plugin", code: str = PLUGIN_CODE,
) -> str:
    """Put a distribution ``dist`` with these entry points (group -> name -> "module:attr",
    ``{module}`` standing for the plugin's module) on sys.path; returns the module name."""
    module = f"mv_test_plugin_{next(_COUNTER)}"
    site = root / f"site-{module}"
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = []
    for group, points in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {target.format(module=module)}" for name, target in points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    (site / f"{module}.py").write_text(code)
    monkeypatch.syspath_prepend(str(site))
    return module


def _group() -> str:
    return f"medverify.test_group_{next(_COUNTER)}"


def _item() -> JudgeItem:
    return JudgeItem(claim=Claim(id="c1", text="Aspirin thins the blood."), passages=[])


# --------------------------------------------------------------------------- Registry


def test_entry_points_add_names_loaded_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = _group()
    module = install_plugin(tmp_path, monkeypatch,
                            {group: {"nothing": "{module}:NoJudge.from_config"}})
    registry: Registry[object] = Registry("thing", group=group)
    registry.register("builtin", lambda config, model: "built in")
    assert registry.names() == ["builtin", "nothing"]
    assert registry.plugin("nothing") == "demo-plugin" and registry.plugin("builtin") is None
    assert "nothing" in registry
    assert module not in sys.modules, "names() must not import the plugin"
    made = registry.build("nothing", "config", "model")
    assert type(made).__name__ == "NoJudge" and made.config == "config"  # type: ignore[attr-defined]
    assert module in sys.modules
    assert registry.get("nothing") is registry.get("nothing")  # loaded once


def test_registry_without_group_reads_no_entry_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = _group()
    install_plugin(tmp_path, monkeypatch, {group: {"nothing": "{module}:NoJudge"}})
    registry: Registry[object] = Registry("thing")
    assert registry.names() == []


def test_plugin_cannot_replace_a_builtin_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    group = _group()
    install_plugin(tmp_path, monkeypatch, {group: {"builtin": "{module}:NoJudge.from_config",
                                                   "extra": "{module}:NoJudge.from_config"}},
                   dist="sneaky-plugin")
    registry: Registry[object] = Registry("thing", group=group)
    registry.register("builtin", lambda config, model: "built in")
    with caplog.at_level(logging.WARNING, logger="medverify.registry"):
        assert registry.names() == ["builtin", "extra"]
    assert registry.build("builtin", None, None) == "built in"
    assert registry.plugin("builtin") is None and registry.plugin("extra") == "sneaky-plugin"
    [record] = [r for r in caplog.records if r.name == "medverify.registry"]
    assert "'builtin'" in record.getMessage() and "sneaky-plugin" in record.getMessage()
    assert "ignored" in record.getMessage()


def test_broken_plugin_fails_only_when_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = _group()
    install_plugin(tmp_path, monkeypatch, {group: {"missing": "no_such_module_xyz:Judge",
                                                   "typo": "{module}:NoSuchClass",
                                                   "fine": "{module}:NoJudge.from_config"}},
                   dist="broken-plugin")
    install_plugin(tmp_path, monkeypatch, {group: {"crash": "{module}:anything"}},
                   dist="crashing-plugin", code="raise RuntimeError('boom at import')\n")
    registry: Registry[object] = Registry("thing", group=group)
    assert registry.names() == ["crash", "fine", "missing", "typo"]
    assert type(registry.build("fine", None, None)).__name__ == "NoJudge"
    with pytest.raises(ConfigError, match=r"thing 'missing' from plugin broken-plugin failed to "
                       r"load \(no_such_module_xyz:Judge\): ModuleNotFoundError"):
        registry.get("missing")
    with pytest.raises(ConfigError, match=r"'typo' from plugin broken-plugin .*AttributeError"):
        registry.get("typo")
    with pytest.raises(ConfigError, match=r"crashing-plugin .*RuntimeError: boom at import"):
        registry.get("crash")


def test_unknown_name_lists_the_known_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = _group()
    install_plugin(tmp_path, monkeypatch, {group: {"nothing": "{module}:NoJudge"}})
    registry: Registry[object] = Registry("thing", group=group)
    registry.register("builtin", "medverify.judge.builtin:BuiltinJudge.from_config")
    with pytest.raises(ConfigError, match=r"unknown thing 'nope'; known: builtin, nothing"):
        registry.get("nope")


def test_load_attr_follows_dotted_attributes() -> None:
    assert load_attr("medverify.judge.llm:LLMJudge.from_config") == LLMJudge.from_config
    assert load_attr("medverify.judge") is judge_module


def test_groups_of_the_registries() -> None:
    import medverify.decompose as decompose

    assert JUDGES.group == "medverify.judges"
    assert providers.group == "medverify.providers"
    assert EMBEDDERS.group == "medverify.embedders"
    assert decompose.DECOMPOSERS.group == "medverify.decomposers"


# --------------------------------------------------------------------------- judges


def test_builtin_judges_are_made_from_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builtin_module, "load_verifier", lambda path: LexicalVerifier())
    config = Config(claims_per_call=3, judge_settings={"cascade_high": 0.8,
                                                       "support_threshold": 0.7})
    model = facade.Model(ScriptedProvider(scripted_judge(keyword_rule(supported="x"))))
    llm = JUDGES.create("llm", config, model)
    assert isinstance(llm, LLMJudge) and llm.claims_per_call == 3 and llm.model is model
    cascade = JUDGES.create("cascade", config, model)
    assert isinstance(cascade, CascadeJudge) and cascade.high == 0.8
    assert cascade.builtin.support_threshold == 0.7 and cascade.llm.claims_per_call == 3
    builtin = JUDGES.create("builtin", config, None)
    assert isinstance(builtin, BuiltinJudge) and builtin.support_threshold == 0.7
    # the configured name
    assert Config(judge="llm").judge_name == Config(model="fake:x").judge_name == "llm"
    # overrides for one judge: a copy of the config with other settings
    quiet = config.model_copy(update={"judge_settings": config.judge_settings.model_copy(
        update={"quotes": False, "max_passages": 24}), "claims_per_call": 8})
    assert JUDGES.create("builtin", quiet, None).quotes is False
    assert JUDGES.create("llm", quiet, model).max_passages == 24  # type: ignore[attr-defined]
    assert JUDGES.create("cascade", quiet, model).llm.claims_per_call == 8  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["llm", "cascade"])
def test_judges_that_need_a_model_say_so(name: str) -> None:
    message = (f"the {name} judge needs a model: pass --model SPEC (or use --judge builtin, "
               "which runs offline)")
    with pytest.raises(ConfigError) as made:
        JUDGES.create(name, Config(), None)
    assert str(made.value) == message


def test_unknown_judge_is_a_config_error_listing_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown judge 'nope'; known: .*builtin.*llm"):
        JUDGES.create(Config(judge="nope").judge_name, Config(), None)


@pytest.fixture
def plugin_judges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Registry[Judge]:
    """medverify.judge.JUDGES with the built-ins and a fake plugin's judges."""
    group = _group()
    install_plugin(tmp_path, monkeypatch, {group: {
        "nothing": "{module}:NoJudge.from_config",
        "failing": "{module}:failing",
        "not-a-judge": "{module}:not_a_judge",
        "broken": "no_such_module_xyz:Judge",
    }})
    registry = judge_module.JudgeRegistry("judge", group=group, protocol=Judge)
    for name in JUDGES.names():
        if JUDGES.plugin(name) is None:
            registry.register(name, JUDGES.get(name))
    monkeypatch.setattr(judge_module, "JUDGES", registry)
    monkeypatch.setattr(checker_module, "JUDGES", registry)
    monkeypatch.setattr(build_module, "JUDGES", registry)  # where `check` makes its judge
    return registry


def test_plugin_judge_from_config(plugin_judges: Registry[Judge]) -> None:
    config = Config(judge="nothing")
    judge = judge_module.JUDGES.create(config.judge_name, config, None)
    assert judge.name == "nothing" and judge.config is config  # type: ignore[attr-defined]
    [verdict] = asyncio.run(judge.judge([_item()]))
    assert verdict.judge == "nothing" and verdict.category.value == "COVERAGE_GAP"


def test_plugin_judge_errors_are_config_errors(plugin_judges: Registry[Judge]) -> None:
    with pytest.raises(ConfigError, match=r"judge 'failing' from plugin demo-plugin failed: "
                       r"ValueError: the plugin is misconfigured"):
        judge_module.JUDGES.create("failing", Config(), None)
    with pytest.raises(ConfigError, match=r"'not-a-judge' from plugin demo-plugin made a int, "
                       r"which is not a judge"):
        judge_module.JUDGES.create("not-a-judge", Config(), None)
    with pytest.raises(ConfigError, match=r"judge 'broken' from plugin demo-plugin failed to "
                       r"load"):
        judge_module.JUDGES.create("broken", Config(), None)
    # a broken plugin does not stop the others
    assert judge_module.JUDGES.create("nothing", Config(), None).name == "nothing"


def test_cli_choices_come_from_the_registry(
    plugin_judges: Registry[Judge], tmp_path: Path
) -> None:
    assert "nothing" in registry_names("medverify.judge:JUDGES")
    choice = RegistryChoice("medverify.judge:JUDGES")
    assert "nothing" in choice.choices and "builtin" in choice.choices
    helped = CliRunner().invoke(main, ["check", "--help"])
    assert helped.exit_code == 0
    assert "--judge [broken|builtin|cascade|failing|llm|llm-scored|not-a-judge|nothing]" \
        in helped.output
    refused = CliRunner().invoke(main, ["check", "-", "--judge", "nope"])
    assert refused.exit_code == 2 and "'nope' is not one of" in refused.output
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="d", text="Aspirin thins the blood.")])
    failed = CliRunner().invoke(main, ["check", "-", "--kb", str(tmp_path / "kb"), "--judge",
                                       "failing", "--no-record"], input="Aspirin thins blood.")
    assert failed.exit_code == 2
    assert "judge 'failing' from plugin demo-plugin failed" in failed.output


# --------------------------------------------------------------------------- providers, embedders


def _patched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, module: object, attr: str,
             kind: str, group_name: str, target: str) -> None:
    """Replace ``module.attr`` by a registry with its built-ins and a fake plugin's entry."""
    group = _group()
    install_plugin(tmp_path, monkeypatch, {group: {group_name: target}})
    original: Registry[object] = getattr(module, attr)
    registry: Registry[object] = type(original)(kind, group=group, protocol=original.protocol)
    for name in original.names():
        if original.plugin(name) is None:
            registry.register(name, original.get(name))
    monkeypatch.setattr(module, attr, registry)


def test_plugin_provider_serves_its_spec_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _patched(monkeypatch, tmp_path, facade, "providers", "model provider", "echo",
             "{module}:Echo")
    model = facade.get_model("echo:small?timeout=5")
    assert model.provider.id == "echo:small"
    assert model.provider.settings.timeout_s == 5  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"unknown model provider 'nope'; known: .*echo"):
        facade.get_model("nope:small")


def test_plugin_embedder_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _patched(monkeypatch, tmp_path, embed_module, "EMBEDDERS", "embedder", "ones",
             "{module}:OnesEmbedder")
    embedder = get_embedder("ones")
    assert embedder.id == "ones" and embedder.embed(["a", "b"]).shape == (2, 3)
    assert np.allclose(np.linalg.norm(embedder.embed(["a"]), axis=1), 1.0)
    assert get_embedder("hash").id == "hash-256"


def test_every_registry_wraps_a_plugins_failures_the_same_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from medverify import decompose

    _patched(monkeypatch, tmp_path, decompose, "DECOMPOSERS", "decomposer", "failing",
             "{module}:failing")
    with pytest.raises(ConfigError, match=r"decomposer 'failing' from plugin demo-plugin "
                       r"failed: ValueError: the plugin is misconfigured"):
        decompose.DECOMPOSERS.create("failing", Config(), None)
    _patched(monkeypatch, tmp_path, facade, "providers", "model provider", "answerless",
             "{module}:not_a_judge")
    with pytest.raises(ConfigError, match=r"model provider 'answerless' from plugin "
                       r"demo-plugin made a int, which is not a model provider"):
        facade.get_model("answerless:small")


def test_judges_declare_what_callers_used_to_read_from_their_names() -> None:
    from medverify.judge import JUDGES, declares

    traits = ("offline", "needs_model", "io_bound", "composite", "second_stage")
    table = {name: {t for t in traits if declares(name, t)} for name in JUDGES.names()}
    assert table["builtin"] == {"offline"}
    assert table["llm"] == {"needs_model", "io_bound", "second_stage"}
    assert table["llm-scored"] == {"needs_model", "second_stage"}
    assert table["cascade"] == {"needs_model", "composite"}


def test_an_embedder_registry_hands_a_model_embedder_its_precision_device_and_runtime() -> None:
    from medverify.kb.embed import EmbedderRegistry
    from medverify.kb.embed_base import HashEmbedder

    registry = EmbedderRegistry("embedder")
    asked: list[tuple[str, str, str]] = []

    def model_embedder(precision: str, device: str, runtime: str) -> HashEmbedder:
        asked.append((precision, device, runtime))
        return HashEmbedder()

    registry.register("model", model_embedder, options=True)
    registry.register("plain", HashEmbedder)  # no settings: called as factory()
    assert isinstance(registry.create("model", "int8", "cpu", "onnx"), HashEmbedder)
    assert isinstance(registry.create("plain", "int8", "cpu", "onnx"), HashEmbedder)
    assert asked == [("int8", "cpu", "onnx")]
    registry.register("model", HashEmbedder)  # registered again without options
    registry.create("model", "fp16")
    assert asked == [("int8", "cpu", "onnx")]
