"""Write a large, clearly synthetic passage corpus for KB scale benchmarks.

Each passage is made of real sentences reshuffled: its title is the title of one real
source document (MedQuAD, or a retrieval corpus in ``../shared/data/retrieval``); about
two thirds of its 3 to 6 sentences come from that document and the rest from other
documents, in random order. The text is therefore realistic in vocabulary, length and
term statistics (what FTS5 and an ANN index see) while no passage is a real document:
every record is labelled ``"synthetic": true``, its ``doc_id`` starts with ``synthetic:``
and its ``source`` says how it was made. Never use it as evidence.

    .venv/bin/python benchmarks/make_large_corpus.py --n 1000000 --out /tmp/large.jsonl

Sources read (all in ``../shared/data``; see its README for licences): MedQuAD XML
answers (CC BY 4.0), the Check-COVID and Citation-Integrity retrieval corpora (MIT).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir()
SYNTHETIC_SOURCE = "synthetic: shuffled sentences of MedQuAD, Check-COVID, Citation-Integrity"

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])|\n+")
MIN_CHARS, MAX_CHARS = 30, 400


@dataclass
class SourceDoc:
    """A real document reduced to its title and the ids of its sentences in the pool."""

    title: str
    sentences: list[int]
    origin: str


@dataclass
class SentencePool:
    """Distinct real sentences and the documents they came from."""

    sentences: list[str]
    docs: list[SourceDoc]

    def restricted(self, max_sentences: int, seed: int = 0) -> SentencePool:
        """A pool of at most ``max_sentences`` sentences: whole documents in a seeded order
        until the budget is used (so passages stay topic-coherent)."""
        order = list(range(len(self.docs)))
        random.Random(seed).shuffle(order)
        keep: dict[int, int] = {}
        docs = []
        for i in order:
            doc = self.docs[i]
            new = [s for s in doc.sentences if s not in keep]
            if len(keep) + len(new) > max_sentences:
                continue
            for s in new:
                keep[s] = len(keep)
            docs.append(SourceDoc(doc.title, [keep[s] for s in doc.sentences], doc.origin))
        sentences = [""] * len(keep)
        for old, new_id in keep.items():
            sentences[new_id] = self.sentences[old]
        return SentencePool(sentences, docs)


def split_sentences(text: str) -> list[str]:
    out = []
    for part in _SENTENCE_END.split(text):
        part = " ".join(part.split())
        if MIN_CHARS <= len(part) <= MAX_CHARS:
            out.append(part)
    return out


def _medquad(root: Path) -> Iterator[tuple[str, str, str]]:
    import xml.etree.ElementTree as ET

    for path in sorted(root.rglob("*.xml")):
        try:
            doc = ET.parse(path).getroot()
        except ET.ParseError:
            continue
        title = (doc.findtext("Focus") or doc.findtext("focus") or "").strip()
        answers = [a.text or "" for a in doc.iter("Answer")] + [a.text or ""
                                                                for a in doc.iter("answer")]
        text = "\n".join(a.strip() for a in answers if a.strip())
        if text:
            yield title or path.stem, text, "medquad"


def _jsonl(path: Path, origin: str) -> Iterator[tuple[str, str, str]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if record.get("text"):
                yield record.get("title") or "", record["text"], origin


def load_pool(data: Path = DATA) -> SentencePool:
    """Every distinct sentence (30 to 400 characters) of the sources, by document."""
    sources = [_medquad(data / "raw" / "medquad")]
    for name in ("checkcovid", "citint"):
        corpus = data / "retrieval" / name / "corpus.jsonl"
        if corpus.is_file():
            sources.append(_jsonl(corpus, name))
    ids: dict[str, int] = {}
    docs = []
    for source in sources:
        for title, text, origin in source:
            sentence_ids = [ids.setdefault(s, len(ids)) for s in split_sentences(text)]
            if len(sentence_ids) >= 2:
                if not title:  # untitled abstracts: their first words stand in
                    title = " ".join(next(iter(split_sentences(text))).split()[:8])
                docs.append(SourceDoc(title, sentence_ids, origin))
    if not docs:
        raise SystemExit(f"no source documents found under {data}")
    return SentencePool(list(ids), docs)


def passage_plans(pool: SentencePool, n: int, seed: int = 0
                  ) -> Iterator[tuple[int, list[int]]]:
    """``n`` (source document, sentence ids) plans, seeded: 3 to 6 sentences, about two
    thirds from the source document, the rest from random documents, shuffled."""
    rng = random.Random(seed)
    docs = pool.docs
    for _ in range(n):
        home = rng.randrange(len(docs))
        size = rng.randint(3, 6)
        own = docs[home].sentences
        take = min(len(own), max(1, round(size * 2 / 3)))
        chosen = rng.sample(own, take)
        while len(chosen) < size:
            other = docs[rng.randrange(len(docs))].sentences
            chosen.append(other[rng.randrange(len(other))])
        rng.shuffle(chosen)
        yield home, chosen


def passages(pool: SentencePool, n: int, seed: int = 0) -> Iterator[dict[str, object]]:
    """The synthetic passage records (JSONL rows for ``medverify kb ingest``)."""
    for i, (home, chosen) in enumerate(passage_plans(pool, n, seed)):
        doc = pool.docs[home]
        yield {"doc_id": f"synthetic:{i:08d}", "title": doc.title,
               "text": " ".join(pool.sentences[s] for s in chosen),
               "source": SYNTHETIC_SOURCE, "synthetic": True, "title_from": doc.origin}


def write_corpus(out: Path, n: int, seed: int = 0, pool: SentencePool | None = None) -> dict:
    """Write ``n`` synthetic passages to ``out`` (JSONL); returns a summary."""
    started = time.perf_counter()
    pool = pool or load_pool()
    loaded = time.perf_counter() - started
    out.parent.mkdir(parents=True, exist_ok=True)
    chars = 0
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for record in passages(pool, n, seed):
            line = json.dumps(record, ensure_ascii=False)
            chars += len(record["text"])  # type: ignore[arg-type]
            handle.write(line + "\n")
    tmp.replace(out)
    return {"passages": n, "seed": seed, "pool_sentences": len(pool.sentences),
            "pool_documents": len(pool.docs), "mean_chars": round(chars / max(n, 1), 1),
            "bytes": out.stat().st_size, "load_s": round(loaded, 1),
            "seconds": round(time.perf_counter() - started, 1), "synthetic": True,
            "source": SYNTHETIC_SOURCE}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="passages (default 1M)")
    parser.add_argument("--out", type=Path, required=True, help="JSONL file to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=DATA, help="the shared data folder")
    args = parser.parse_args(argv)
    summary = write_corpus(args.out, args.n, args.seed, load_pool(args.data))
    json.dump(summary, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
