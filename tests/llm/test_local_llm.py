"""The in-process chat provider (``local:PATH``) on a tiny random Qwen2 chat model, and the
local model catalogue (assembling parts, the GGUF tensor mapping)."""

from __future__ import annotations

import asyncio
import hashlib
import sys
from pathlib import Path

import pytest

from medverify.errors import ConfigError, ProviderError
from medverify.llm import local_models
from medverify.llm.base import ChatRequest, Message
from medverify.llm.facade import get_model
from medverify.llm.gguf_files import CorruptModelError
from medverify.llm.local import LocalChatProvider, Runner, _JsonDepth
from medverify.llm.local_models import LocalModel, assemble, hf_name, resolve_model_dir
from medverify.testing.tiny_lm import build_tiny_chat_lm


@pytest.fixture(scope="module")
def tiny_chat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_chat_lm(tmp_path_factory.mktemp("tiny") / "chat")


def _request(text: str, **options: object) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message(role="user", content=text),),
                       **options)  # type: ignore[arg-type]


def test_generates_with_logprobs_and_counts_tokens(tiny_chat: Path) -> None:
    async def run() -> None:
        async with get_model(f"local:{tiny_chat}") as model:
            done = await model.complete([Message(role="user", content="Is it? Yes or No.")],
                                        stage="t", max_tokens=4, top_logprobs=3)
            assert done.usage.completion_tokens <= 4 and done.usage.prompt_tokens > 5
            assert done.logprobs is not None and len(done.logprobs) == done.usage.completion_tokens
            first = done.logprobs[0]
            assert len(first.top) == 3 and first.top[0].logprob >= first.top[-1].logprob
            assert first.logprob == pytest.approx(first.top[0].logprob)  # greedy
            assert model.id.startswith(f"local:{tiny_chat}#")

    asyncio.run(run())


def test_prefix_reuse_gives_the_same_answer_as_a_fresh_model(tiny_chat: Path) -> None:
    shared = "Evidence: metformin is first-line for type 2 diabetes. " * 5
    first = _request(shared + "Question one?", max_tokens=3, top_logprobs=5)
    second = _request(shared + "Question two?", max_tokens=3, top_logprobs=5)
    warm = Runner.load(tiny_chat)
    warm.chat(first, 4096)
    reused = warm.chat(second, 4096)
    fresh = Runner.load(tiny_chat).chat(second, 4096)
    assert reused.text == fresh.text
    assert reused.logprobs is not None and fresh.logprobs is not None
    for a, b in zip(reused.logprobs, fresh.logprobs, strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-3)
    # a request that is a prefix of the kept tokens is answered too (the cache is cropped);
    # 3 tokens, as above: the default 512 of a random model add nothing to what is checked
    cropped = warm.chat(_request(shared, max_tokens=3), 4096)
    assert cropped.usage.prompt_tokens < reused.usage.prompt_tokens


def test_json_mode_starts_the_object_and_the_depth_tracker_ends_it(tiny_chat: Path) -> None:
    reply = Runner.load(tiny_chat).chat(_request("JSON please", json_mode=True,
                                                 max_tokens=8), 4096)
    assert reply.text.lstrip().startswith("{")  # the first token is forced to open it
    depth = _JsonDepth(0)
    assert not depth.feed('{"a": "}{", "b": {')
    assert not depth.feed('"c": 1}')
    assert depth.feed("}")


def test_long_prompts_are_refused_not_truncated(tiny_chat: Path) -> None:
    provider = LocalChatProvider(str(tiny_chat), max_prompt_tokens=20)
    with pytest.raises(ProviderError, match="longer than") as caught:
        asyncio.run(provider.complete(_request("word " * 100)))
    assert caught.value.retryable is False


def test_unknown_or_unprepared_models_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"models prepare qwen2\.5-0\.5b"):
        resolve_model_dir("qwen2.5-0.5b")
    with pytest.raises(ConfigError, match="known names"):
        resolve_model_dir("gpt-17")
    with pytest.raises(ConfigError, match=r"no config\.json"):
        resolve_model_dir(str(tmp_path))


def test_gguf_tensor_names_map_one_to_one_onto_qwen2() -> None:
    assert hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert hf_name("blk.11.attn_q.bias") == "model.layers.11.self_attn.q_proj.bias"
    assert hf_name("blk.0.ffn_down.weight") == "model.layers.0.mlp.down_proj.weight"
    with pytest.raises(ConfigError, match="no Qwen2ForCausalLM counterpart"):
        hf_name("blk.0.attn_qkv.weight")


def _fake_parts(root: Path, monkeypatch: pytest.MonkeyPatch, chunks: list[bytes]) -> LocalModel:
    names = []
    for i, chunk in enumerate(chunks, 1):
        name = f"mvfakepart{i}"
        (root / name / "data").mkdir(parents=True)
        (root / name / "__init__.py").write_text("", "utf-8")
        (root / name / "data" / f"part{i:02d}.bin").write_bytes(chunk)
        names.append(name)
    monkeypatch.syspath_prepend(str(root))
    for name in names:
        sys.modules.pop(name, None)
    digest = hashlib.sha256(b"".join(chunks)).hexdigest()
    return LocalModel(name="fake", parts=tuple(names), sha256=digest,
                      size=sum(map(len, chunks)), upstream="none", licence="none")


def test_assemble_concatenates_in_order_and_checks_the_digest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = _fake_parts(tmp_path / "site", monkeypatch, [b"GGUF", b"abc", b"def"])
    target = assemble(entry, tmp_path / "out" / "m.gguf")
    assert target.read_bytes() == b"GGUFabcdef"
    wrong = LocalModel(**{**entry.__dict__, "sha256": "0" * 64})
    with pytest.raises(CorruptModelError, match="reinstall the parts"):
        assemble(wrong, tmp_path / "out" / "bad.gguf")
    assert not (tmp_path / "out" / "bad.gguf").exists()
    assert not list((tmp_path / "out").glob("*.partial"))


def test_a_missing_part_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = local_models.CATALOGUE["qwen2.5-0.5b"]
    missing = LocalModel(**{**entry.__dict__, "parts": ("mv-no-such-part-1",)})
    with pytest.raises(ConfigError, match="pip install mv-no-such-part-1"):
        local_models.part_files(missing)


def test_the_catalogue_records_licences_and_digests() -> None:
    licences = {"qwen2.5-0.5b": "Apache-2.0", "qwen2.5-1.5b": "Apache-2.0",
                "smollm2-135m": "Apache-2.0", "gemma3-270m": "Gemma Terms of Use"}
    assert {n: e.licence for n, e in local_models.CATALOGUE.items()} == licences
    for entry in local_models.CATALOGUE.values():
        assert len(entry.sha256) == 64 and entry.size > 0 and entry.parts
        assert entry.layout in ("parts", "package")
        assert entry.converter in ("qwen2", "transformers")
        assert (entry.converter == "qwen2") == entry.upstream.startswith("Qwen/")


def test_a_timed_out_call_stops_and_frees_the_model(tiny_chat: Path) -> None:
    async def run() -> None:
        provider = LocalChatProvider(str(tiny_chat))
        long = _request("word " * 50, max_tokens=4000)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(provider.complete(long), 0.5)
        done = await asyncio.wait_for(provider.complete(_request("hi", max_tokens=2)), 60)
        assert done.usage.completion_tokens <= 2

    asyncio.run(run())


def test_local_models_get_a_long_default_timeout_unless_the_spec_sets_one(
        tiny_chat: Path) -> None:
    assert get_model(f"local:{tiny_chat}").settings.timeout_s == 900
    assert get_model(f"local:{tiny_chat}?timeout=30").settings.timeout_s == 30


def test_models_cli_lists_the_catalogue_and_refuses_unknown_names() -> None:
    from click.testing import CliRunner

    from medverify.cli import main

    runner = CliRunner(env={"COLUMNS": "200"})
    listed = runner.invoke(main, ["models", "list"])
    assert listed.exit_code == 0 and "Local models" in listed.output
    assert "qwen2.5" in listed.output  # the table may be narrow: names can be cut
    refused = runner.invoke(main, ["models", "prepare", "gpt-17"])
    known = "known: gemma3-270m, qwen2.5-0.5b, qwen2.5-1.5b, smollm2-135m"
    assert refused.exit_code == 2 and known in refused.output
