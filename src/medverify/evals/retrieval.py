"""Retrieval on data with known answers: recall@k and MRR over a corpus and queries
(``medverify eval retrieval``).

Inputs are JSONL files: a corpus of ``{doc_id, title, text}`` and queries of
``{id, query, relevant: [doc_id, ...]}``. Retrieved chunks are collapsed to documents
(first occurrence wins) before scoring, so recall@k counts the top-k *documents*.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from medverify.config import KBSettings, RetrievalSettings, home
from medverify.errors import InputError
from medverify.kb.embed import Embedder, get_embedder
from medverify.kb.loaders import LoadReport, iter_documents
from medverify.kb.store import KnowledgeBase
from medverify.records import utcnow
from medverify.retrieve import MODES, Mode, Retriever, dedupe_documents

CHUNKS_PER_DOC = 5
QUERY_BATCH = 256


class Query(BaseModel):
    id: str
    query: str
    relevant: list[str]


class ModeResult(BaseModel):
    """Scores of one retrieval mode."""

    mode: str
    n_queries: int
    recall: dict[int, float]
    mrr: float
    mrr_depth: int
    seconds: float


class RetrievalEval(BaseModel):
    """A retrieval evaluation with what it ran on."""

    corpus: str
    queries: str
    kb_path: str
    snapshot_id: str
    embedder_id: str
    chunk_tokens: int
    chunk_overlap: int
    ks: list[int]
    results: list[ModeResult]
    created_at: str = Field(default_factory=lambda: utcnow().isoformat())

    def by_mode(self, mode: str) -> ModeResult:
        return next(r for r in self.results if r.mode == mode)


def load_queries(path: str | Path) -> list[Query]:
    """Queries with at least one relevant document (others cannot be scored)."""
    queries = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                queries.append(_parse_query(line, f"{path}:{number}"))
    usable = [q for q in queries if q.relevant]
    if not usable:
        raise InputError(f"{path} has no queries with relevant documents")
    return usable


def _parse_query(line: str, where: str) -> Query:
    try:
        obj = json.loads(line)
        return Query(id=str(obj.get("id", where)), query=obj["query"],
                     relevant=[str(r) for r in obj.get("relevant", [])])
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{where}: bad query record ({exc})") from exc


def file_hash(path: str | Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()[:16]


def default_kb_dir(corpus: str | Path, embedder_id: str, settings: KBSettings) -> Path:
    """A cache directory keyed by corpus content, embedder and chunk settings."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", embedder_id)
    key = f"{file_hash(corpus)}-{safe}-{settings.chunk_tokens}-{settings.chunk_overlap}"
    return home() / "kb-cache" / key


def build_kb(corpus: str | Path, kb_dir: Path, settings: KBSettings,
             embedder: Embedder, retrieval: RetrievalSettings | None = None) -> KnowledgeBase:
    """Open the KB at ``kb_dir`` (creating it) and ingest the corpus (idempotent)."""
    kb = KnowledgeBase.open_or_create(kb_dir, settings, embedder, retrieval)
    kb.ingest(iter_documents([corpus], LoadReport()))
    return kb


def rank_metrics(ranked: Sequence[Sequence[str]], relevant: Sequence[Sequence[str]],
                 ks: Sequence[int]) -> tuple[dict[int, float], float]:
    """recall@k (share of queries with any relevant doc in the top k) and MRR@max(ks)."""
    depth = max(ks)
    hits = dict.fromkeys(ks, 0)
    reciprocal = 0.0
    for docs, gold in zip(ranked, relevant, strict=True):
        first = next((i for i, d in enumerate(docs[:depth], start=1) if d in set(gold)), None)
        if first is not None:
            reciprocal += 1.0 / first
            for k in ks:
                hits[k] += first <= k
    n = max(len(ranked), 1)
    return {k: hits[k] / n for k in ks}, reciprocal / n


def score_mode(kb: KnowledgeBase, queries: list[Query], mode: Mode,
               ks: Sequence[int]) -> ModeResult:
    depth = max(ks)
    retriever = Retriever(kb)  # fusion settings: the ones the KB was opened with
    started = time.perf_counter()
    ranked: list[list[str]] = []
    for i in range(0, len(queries), QUERY_BATCH):
        texts = [q.query for q in queries[i:i + QUERY_BATCH]]
        for passages in retriever.search_many(texts, k=depth * CHUNKS_PER_DOC, mode=mode):
            ranked.append(dedupe_documents(passages, depth))
    seconds = time.perf_counter() - started
    recall, mrr = rank_metrics(ranked, [q.relevant for q in queries], ks)
    return ModeResult(mode=mode, n_queries=len(queries), recall=recall, mrr=mrr,
                      mrr_depth=depth, seconds=seconds)


def evaluate_retrieval(corpus: str | Path, queries: str | Path,
                       ks: Sequence[int] = (1, 5, 10), modes: Sequence[Mode] = MODES,
                       kb_dir: str | Path | None = None, settings: KBSettings | None = None,
                       embedder: Embedder | str | None = None,
                       retrieval: RetrievalSettings | None = None) -> RetrievalEval:
    """Build (or reuse) a KB over ``corpus`` and score each mode on ``queries``."""
    settings = settings or KBSettings()
    emb = get_embedder(embedder if embedder is not None else settings.embedder,
                       settings.embed_precision, settings.embed_device)
    precision = getattr(emb, "precision", "fp32")
    target = Path(kb_dir) if kb_dir else default_kb_dir(
        corpus, emb.id if precision == "fp32" else f"{emb.id}-{precision}", settings)
    query_list = load_queries(queries)
    ks = sorted(set(ks))
    with build_kb(corpus, target, settings, emb, retrieval) as kb:
        results = [score_mode(kb, query_list, mode, ks) for mode in modes]
        return RetrievalEval(corpus=str(corpus), queries=str(queries), kb_path=str(target),
                             snapshot_id=kb.snapshot_id, embedder_id=kb.embedder_id,
                             chunk_tokens=kb.settings.chunk_tokens,
                             chunk_overlap=kb.settings.chunk_overlap, ks=ks, results=results)
