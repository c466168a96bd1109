"""Build the shipped MedQuAD sample corpus (src/medverify/data/medquad_sample.jsonl).

Picks about 300 MedQuAD documents deterministically (fixed seed), spread over the
collections that still carry answer text, keeping only documents with at least one
answered question. Usage::

    python scripts/make_sample_kb.py [--medquad ../shared/data/raw/medquad] [--n 300]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from medverify.files import data_dir
from medverify.kb.loaders import LoadReport, iter_documents
from medverify.records import Document

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MEDQUAD = data_dir() / "raw" / "medquad"
OUT = ROOT / "src" / "medverify" / "data" / "medquad_sample.jsonl"
SEED = 20190511
MAX_DOC_CHARS = 40_000


def collections(medquad: Path) -> list[Path]:
    return sorted(p for p in medquad.iterdir() if p.is_dir() and any(p.glob("*.xml")))


def answered(folder: Path) -> list[Document]:
    docs = iter_documents(sorted(folder.glob("*.xml")), LoadReport())
    return [d for d in docs if len(d.text) <= MAX_DOC_CHARS]


def quotas(sizes: dict[str, int], total: int) -> dict[str, int]:
    """Share ``total`` over collections as evenly as their sizes allow."""
    quota = dict.fromkeys(sizes, 0)
    left = total
    open_ = [name for name, size in sizes.items() if size > 0]
    while left > 0 and open_:
        share = max(1, left // len(open_))
        for name in list(open_):
            take = min(share, sizes[name] - quota[name], left)
            quota[name] += take
            left -= take
            if quota[name] >= sizes[name]:
                open_.remove(name)
    return quota


def pick(medquad: Path, total: int) -> tuple[list[Document], dict[str, int]]:
    pools = {folder.name: answered(folder) for folder in collections(medquad)}
    quota = quotas({name: len(docs) for name, docs in pools.items()}, total)
    rng = random.Random(SEED)
    chosen: list[Document] = []
    for name in sorted(pools):
        chosen.extend(rng.sample(pools[name], quota[name]))
    return chosen, quota


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--medquad", type=Path, default=DEFAULT_MEDQUAD)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    docs, quota = pick(args.medquad, args.n)
    with args.out.open("w", encoding="utf-8") as handle:
        for doc in docs:
            record = {"doc_id": doc.doc_id, "title": doc.title, "text": doc.text,
                      "url": doc.url, "source": doc.source}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"wrote {len(docs)} documents ({args.out.stat().st_size / 1e6:.2f} MB) to {args.out}")
    for name, count in quota.items():
        print(f"  {name}: {count}")


if __name__ == "__main__":
    main()
