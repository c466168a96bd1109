"""On the GPU machine: the base model directory for training (``make_base.py DIR``), from
the shipped v2 weights (embeddings and layers 1-3, equal to the base's in float16) and the
carried ``DIR/part.safetensors`` (word embeddings and layer 4 of the base, float16);
written as float32 with a 4-layer config."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

SHIPPED = "src/medverify/verifier/weights/verifier.safetensors"


def main() -> None:
    base = Path(sys.argv[1])
    tensors = {k[len("encoder."):]: v for k, v in load_file(SHIPPED).items()
               if k.startswith("encoder.") and not k.startswith("encoder.encoder.layer.3.")}
    tensors.update(load_file(str(base / "part.safetensors")))
    save_file({k: v.float().contiguous() for k, v in tensors.items()},
              str(base / "model.safetensors"))
    config = json.loads((base / "config.json").read_text())
    config["num_hidden_layers"] = 4
    (base / "config.json").write_text(json.dumps(config))
    print("base tensors", len(tensors))


if __name__ == "__main__":
    main()
