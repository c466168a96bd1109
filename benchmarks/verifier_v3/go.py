"""One fine-tuning run on the GPU machine (or a smoke run here):
``go.py NAME OUT [key=value ...]`` with FinetuneConfig fields as JSON values; writes
OUT/NAME.json (the run's verifier.json)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from medverify.verifier.finetune import FinetuneConfig, finetune

EVAL = ("checkcovid_dev", "citint_dev", "healthver_dev", "expertqa_val")


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    name, out = sys.argv[1], Path(sys.argv[2])
    fields = {k: json.loads(v) for k, v in (a.split("=", 1) for a in sys.argv[3:])}
    pairs = Path(fields.pop("pairs", "/tmp/pairs"))
    config = FinetuneConfig(data_dir=pairs, out=Path("/tmp/runs") / name,
                            eval_files=[pairs / f"{n}.jsonl" for n in EVAL], **fields)
    meta = finetune(config)
    (out / f"{name}.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(name, json.dumps({k: meta[k] for k in ("held_out_macro_f1", "dev", "timing")}))


if __name__ == "__main__":
    main()
