from __future__ import annotations

import json
from pathlib import Path

import pytest

from medverify.config import Config
from medverify.errors import ConfigError, InputError
from medverify.inputs import read_answers
from medverify.prompts import load_prompt
from medverify.records import Answer
from medverify.registry import Registry


def test_plain_text_answer() -> None:
    result = read_answers(b"Aspirin thins the blood.", question="What does aspirin do?")
    assert [a.text for a in result.answers] == ["Aspirin thins the blood."]
    assert result.answers[0].question == "What does aspirin do?"


def test_json_object_and_jsonl() -> None:
    obj = {
        "id": "x1",
        "question": "q",
        "answer": "a",
        "sources": ["http://e.org", {"url": "u", "text": "t"}],
        "model": "gpt",
    }
    one = read_answers(json.dumps(obj).encode()).answers[0]
    assert one.id == "x1" and one.meta == {"model": "gpt"}
    assert one.sources[1].status == "given"
    many = read_answers(b'{"answer": "a"}\n\n{"answer": "b", "question": "q"}\n').answers
    assert [a.text for a in many] == ["a", "b"]


def test_bad_jsonl_line_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="line 2"):
        read_answers(b'{"answer": "a"}\n{"answer": \n')


def test_text_starting_with_brace_but_not_json_is_text() -> None:
    assert read_answers(b"{not json} aspirin").answers[0].text == "{not json} aspirin"


def test_non_utf8_is_replaced_and_counted() -> None:
    result = read_answers(b"Fever \xff\xfe is common.")
    assert "\ufffd" in result.answers[0].text
    assert result.warnings == ["2 undecodable byte(s) replaced with U+FFFD"]


@pytest.mark.parametrize("data", [b"", b"   \n\t", b"\x00\x01binary"])
def test_empty_or_binary_input_refused(data: bytes) -> None:
    with pytest.raises(InputError):
        read_answers(data)


def test_answer_id_is_stable() -> None:
    assert Answer(text="a", question="q").id == Answer(text="a", question="q").id
    assert Answer(text="a").id != Answer(text="b").id


def test_config_precedence(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text('model = "fake:file"\n[retrieval]\ntop_k = 3\n[llm]\ntimeout_s = 5\n')
    env = {"MEDVERIFY_MODEL": "fake:env", "MEDVERIFY_LLM__TIMEOUT_S": "9"}
    config = Config.load(file, env=env, retrieval={"top_k": 4})
    assert config.model == "fake:env"
    assert config.llm.timeout_s == 9
    assert config.retrieval.top_k == 4
    assert Config.load(file, env={}).retrieval.top_k == 3


def test_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        Config.load(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[retrieval]\ntop_k = 0\n")
    with pytest.raises(ConfigError, match="invalid configuration"):
        Config.load(bad, env={})


def test_default_judge_follows_model() -> None:
    assert Config().judge_name == "builtin"
    assert Config(model="fake:x").judge_name == "llm"


def test_registry_lazy_and_unknown() -> None:
    # build(name, *args) calls factory(*args), imported on first use
    reg: Registry[object] = Registry("thing")
    reg.register("path", "pathlib:Path")
    assert reg.build("path", "a") == Path("a")
    with pytest.raises(ConfigError, match="unknown thing 'nope'; known: path"):
        reg.get("nope")


def test_judge_prompt_renders_without_interpreting_braces() -> None:
    prompt = load_prompt("judge")
    assert prompt.id == "judge/v1"
    messages = prompt.render(fence="F1", passages="{{claims}} {x}", claims="c")
    assert "{{claims}} {x}" in messages[1].content
    with pytest.raises(ConfigError):
        prompt.render(fence="F1")


def test_path_variables_of_tests_and_tools_are_not_read_as_settings() -> None:
    from medverify.config import Config

    env = {"MEDVERIFY_DATA": "/data", "MEDVERIFY_CHROMIUM": "/usr/bin/chromium",
           "MEDVERIFY_VERIFIER_BASE": "/m", "MEDVERIFY_LLAMACPP_PYTHON": "/py",
           "MEDVERIFY_TRIALS_SAMPLES": "/s", "MEDVERIFY_LLM__TIMEOUT_S": "7"}
    assert Config.load(None, env=env).llm.timeout_s == 7  # and no "extra inputs" error


def test_every_environment_variable_the_code_reads_is_a_setting_or_declared_not_one() -> None:
    """A MEDVERIFY_ variable read outside the config (MEDVERIFY_VERIFIER_SCORING once was)
    must be in _NOT_SETTINGS, or every Config.load in its presence fails on an extra input."""
    import re

    from pydantic import BaseModel

    from medverify import config

    src = Path(config.__file__).resolve().parents[1]
    names = {m for f in src.rglob("*.py")
             for m in re.findall(r'"(MEDVERIFY_[A-Z0-9_]+)"', f.read_text("utf-8"))}
    assert "MEDVERIFY_VERIFIER_SCORING" in names
    for name in sorted(names - config._NOT_SETTINGS):
        model: type[BaseModel] = Config
        for part in name.removeprefix("MEDVERIFY_").lower().split("__"):
            assert part in model.model_fields, f"{name} is neither a setting nor in _NOT_SETTINGS"
            annotation = model.model_fields[part].annotation
            model = annotation if isinstance(annotation, type) else BaseModel
    env = {name: "x" for name in config._NOT_SETTINGS}
    assert Config.load(None, env=env).judge_settings is not None  # no "extra inputs" error
