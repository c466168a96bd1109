"""GGUF files: checking that one is whole before anything loads it.

Shared by ``medverify models prepare`` (local judge models, :mod:`medverify.llm.local_models`)
and ``medverify risk models prepare`` (the risk scorer's real models).
"""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path
from typing import Any

from medverify.errors import InputError, MissingDependencyError

GGUF_MAGIC = b"GGUF"


class CorruptModelError(InputError):
    """A GGUF file that is truncated or not a GGUF file."""


def check_gguf(path: Path) -> dict[str, Any]:
    """Check that ``path`` is a whole GGUF file: the header (magic, version, counts), then,
    with the ``gguf`` package, every tensor's data inside the file. Raises
    :class:`CorruptModelError` (truncated or not GGUF) or :class:`MissingDependencyError`."""
    if not path.is_file():
        raise InputError(f"no such GGUF file: {path}")
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(24)
    if len(head) < 4 or head[:4] != GGUF_MAGIC:
        raise CorruptModelError(f"{path} is not a GGUF file (it does not start with "
                                f"'GGUF'; {size} bytes)")
    if len(head) < 24:
        raise CorruptModelError(f"{path} is truncated: {size} bytes, shorter than a GGUF "
                                "header")
    version, n_tensors, n_kv = struct.unpack("<IQQ", head[4:24])
    if version not in (1, 2, 3):
        raise CorruptModelError(f"{path}: unknown GGUF version {version} (corrupt header?)")
    if importlib.util.find_spec("gguf") is None:
        raise MissingDependencyError("gguf")
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except Exception as exc:  # truncated data, bad offsets, unknown types, short reads
        raise CorruptModelError(f"{path} is truncated or corrupt: the gguf reader fails "
                                f"({type(exc).__name__}: {exc})") from exc
    end = 0
    for tensor in reader.tensors:
        end = max(end, int(tensor.data_offset) + int(tensor.n_bytes))
    if end > size:
        raise CorruptModelError(f"{path} is truncated: its tensors need {end} bytes, the "
                                f"file has {size}")
    arch = reader.fields.get("general.architecture")
    architecture = ""
    if arch is not None:
        architecture = bytes(arch.parts[arch.data[0]]).decode("utf-8", "replace")
    return {"version": version, "tensors": n_tensors, "kv": n_kv, "bytes": size,
            "architecture": architecture}
