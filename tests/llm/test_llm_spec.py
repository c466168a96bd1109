"""Model spec strings, the provider registry and the public API of medverify.llm."""

from __future__ import annotations

import pytest

import medverify.llm
from medverify.config import ModelSettings
from medverify.errors import ConfigError
from medverify.llm import ModelSpec, get_model, parse_spec, providers
from medverify.llm.openai_compat import OpenAICompatProvider, register_endpoint
from medverify.testing import ScriptedProvider, register_fake, unregister_fake


@pytest.mark.parametrize(("text", "expected"), [
    ("openai:gpt-4o-mini", ModelSpec(provider="openai", model="gpt-4o-mini")),
    ("ollama:llama3.1:8b", ModelSpec(provider="ollama", model="llama3.1:8b")),
    ("vllm:meta-llama/Llama-3.1-8B-Instruct@http://gpu:8000/v1/",
     ModelSpec(provider="vllm", model="meta-llama/Llama-3.1-8B-Instruct",
               base_url="http://gpu:8000/v1")),
    ("openai-compatible:m@https://llm.example.org/v1?key_env=EX_KEY&timeout=30&concurrency=4"
     "&retries=0",
     ModelSpec(provider="openai-compatible", model="m", base_url="https://llm.example.org/v1",
               key_env="EX_KEY", timeout_s=30, concurrency=4, max_retries=0)),
    ("  lmstudio:qwen2.5-7b-instruct  ", ModelSpec(provider="lmstudio",
                                                    model="qwen2.5-7b-instruct")),
])
def test_parse_spec(text: str, expected: ModelSpec) -> None:
    spec = parse_spec(text)
    assert spec == expected
    assert parse_spec(str(spec)) == spec


def test_canonical_string() -> None:
    spec = parse_spec("llamacpp:qwen@http://localhost:8080/v1?timeout=120&concurrency=2")
    assert str(spec) == "llamacpp:qwen@http://localhost:8080/v1?timeout=120&concurrency=2"


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty model spec"),
    ("openai", "no model name"),
    ("openai:", "no model name"),
    (":gpt-4o", "bad provider name"),
    ("Open AI:gpt-4o", "bad provider name"),
    ("vllm:@http://h:8000/v1", "missing or blank model name"),
    ("vllm:my model", "missing or blank model name"),
    ("vllm:m@ftp://h/v1", "must look like"),
    ("vllm:m@http://h:port/v1", "must look like"),
    ("vllm:m@localhost:8000", "must look like"),
    ("vllm:m@http://user:pw@h/v1", "credentials"),
    ("openai:m?key=sk-123", "never put an API key"),
    ("openai:m?key_env=sk-abc-123", "NAME of an environment variable"),
    ("openai:m?colour=red", "unknown option 'colour'"),
    ("openai:m?timeout=1&timeout=2", "given twice"),
    ("openai:m?timeout=soon", "timeout_s"),
    ("openai:m?timeout=0", "timeout_s"),
    ("openai:m?concurrency=0", "concurrency"),
    ("openai:m?timeout", "cannot read options"),
])
def test_bad_specs(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_spec(text)


def test_spec_options_override_settings() -> None:
    spec = parse_spec("vllm:m?timeout=5&concurrency=2&retries=1")
    settings = spec.apply(ModelSettings(timeout_s=60, concurrency=8, max_retries=4, backoff_s=2))
    assert (settings.timeout_s, settings.concurrency, settings.max_retries) == (5, 2, 1)
    assert settings.backoff_s == 2


@pytest.mark.parametrize(("text", "provider_id", "key_env"), [
    ("openai:gpt-4o-mini", "openai:gpt-4o-mini@https://api.openai.com/v1", "OPENAI_API_KEY"),
    ("ollama:llama3.1", "ollama:llama3.1@http://localhost:11434/v1", None),
    ("llamacpp:q", "llamacpp:q@http://localhost:8080/v1", None),
    ("lmstudio:q", "lmstudio:q@http://localhost:1234/v1", None),
    ("vllm:q@http://gpu:8000/v1?key_env=VLLM_KEY", "vllm:q@http://gpu:8000/v1", "VLLM_KEY"),
])
def test_builtin_providers(text: str, provider_id: str, key_env: str | None) -> None:
    model = get_model(text)
    assert isinstance(model.provider, OpenAICompatProvider)
    assert model.id == provider_id
    assert model.provider.key_env == key_env
    assert model.spec == text and model.name == provider_id.split(":", 1)[1].split("@")[0]


def test_generic_provider_needs_base_url() -> None:
    with pytest.raises(ConfigError, match="needs a base URL"):
        get_model("openai-compatible:m")


def test_unknown_provider_lists_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown model provider 'nope'.*ollama"):
        get_model("nope:m")


def test_plugin_providers_use_the_same_registry() -> None:
    made: list[ModelSpec] = []

    def factory(spec: ModelSpec, settings: ModelSettings) -> ScriptedProvider:
        made.append(spec)
        return ScriptedProvider(["hi"], name="plugin")

    providers.register("myplugin", factory)
    try:
        model = get_model("myplugin:big-model")
    finally:
        providers._factories.pop("myplugin")
    assert model.id == "fake:plugin" and made[0].model == "big-model"


def test_register_endpoint_adds_a_named_service() -> None:
    register_endpoint("example", "https://api.example.org/v1/", key_env="EXAMPLE_KEY")
    try:
        model = get_model("example:m1")
    finally:
        providers._factories.pop("example")
    assert model.id == "example:m1@https://api.example.org/v1"


def test_fake_specs_resolve_to_registered_providers() -> None:
    fake = register_fake("spec-test", ScriptedProvider(["x"]))
    try:
        assert get_model("fake:spec-test").provider is fake
    finally:
        unregister_fake("spec-test")
    with pytest.raises(ConfigError, match="no fake provider registered as 'spec-test'"):
        get_model("fake:spec-test")


def test_public_api_is_pinned() -> None:
    assert sorted(medverify.llm.__all__) == [
        "BudgetSpent", "ChatRequest", "Completion", "Message", "Model", "ModelSpec",
        "Provider", "ReplyTooLarge", "RequestCache", "TokenCount", "UsageLedger",
        "answer_budget", "get_model", "parse_spec", "providers",
    ]
