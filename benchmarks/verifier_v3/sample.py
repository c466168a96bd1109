"""On the GPU machine (round 3): ``sample.py FULL.jsonl.xz OUT.jsonl.gz FULL.jsonl.gz``
writes the whole corpus gzipped (what ``finetune`` reads) and the seeded 50k sample of rounds
1-2 (the same ``random.Random(0)`` shuffle as ``prepare_device.sample``)."""

from __future__ import annotations

import gzip
import lzma
import random
import sys


def main() -> None:
    with lzma.open(sys.argv[1], "rt", encoding="utf-8") as handle:
        text = handle.read()
    with gzip.open(sys.argv[3], "wt", encoding="utf-8", compresslevel=1) as f:
        f.write(text)
    rows = text.splitlines()
    random.Random(0).shuffle(rows)
    with gzip.open(sys.argv[2], "wt", encoding="utf-8", compresslevel=1) as f:
        f.write("\n".join(rows[:50_000]) + "\n")
    print("corpus rows", len(rows))


if __name__ == "__main__":
    main()
