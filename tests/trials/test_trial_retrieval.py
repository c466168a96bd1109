"""A long section of a trial summary stays searchable in a trial KB: every chunk of it is
stored under its document's title (trial id, brief title, section name), which BM25 counts
and the embedder sees with the chunk, and a fact deep in the section is retrieved, filtered
to the trial, for a query naming it (benchmarks/bench_trials_retrieval.py measures this on
the sample records)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medverify.config import KBSettings
from medverify.kb import KnowledgeBase
from medverify.kb.embed_base import HashEmbedder
from medverify.retrieve import Retriever
from medverify.trials.curate import curate, summary_documents

NCT = "NCT09990001"
TITLE = "Zorblimab Versus Placebo in Plaque Psoriasis"
DEEP = "Malignant melanoma"


def _word(i: int) -> str:
    """A distinct made-up word per ``i`` (so filler terms share no rare token)."""
    return "".join(chr(97 + (i // 26 ** j) % 26) for j in range(3)) + "itis"


def long_record(n_events: int = 400, deep_at: int = 330) -> dict[str, Any]:
    """A record whose serious adverse events section runs to many chunks, with ``DEEP`` as
    its ``deep_at``-th serious event."""
    groups = [{"id": "EG000", "title": "Zorblimab 300 mg", "seriousNumAffected": 40,
               "seriousNumAtRisk": 200},
              {"id": "EG001", "title": "Placebo", "seriousNumAffected": 12,
               "seriousNumAtRisk": 198}]
    events = [{"term": DEEP if i == deep_at else f"Reaction {_word(i)}",
               "organSystem": "General disorders",
               "stats": [{"groupId": "EG000", "numAffected": 1 + i % 3, "numAtRisk": 200},
                         {"groupId": "EG001", "numAffected": i % 2, "numAtRisk": 198}]}
              for i in range(n_events)]
    return {
        "protocolSection": {
            "identificationModule": {"nctId": NCT, "briefTitle": TITLE},
            "statusModule": {"overallStatus": "COMPLETED"},
        },
        "resultsSection": {"adverseEventsModule": {"eventGroups": groups,
                                                   "seriousEvents": events}},
        "hasResults": True,
    }


def test_every_chunk_of_a_long_section_is_findable_and_a_deep_fact_is_found(
        tmp_path: Path) -> None:
    study = long_record()
    docs = summary_documents(curate(study), study)
    section = f"{NCT}#serious-adverse-events"
    assert len(next(d.text for d in docs if d.doc_id == section)) > 20_000
    with KnowledgeBase.create(tmp_path / "kb", KBSettings(embedder="hash"),
                              HashEmbedder(256)) as kb:
        kb.ingest(docs)
        chunks = sorted((c for c in kb.subset({"nct_id": NCT}).chunks if c.doc_id == section),
                        key=lambda c: c.order)
        assert len(chunks) >= 8
        # every chunk carries the trial id, its title and the section's name
        assert {c.title for c in chunks} == {f"{NCT} {TITLE}: serious adverse events"}
        # the fact's own sentence (its per-group mention comes early) sits deep in it
        sentence = f"Serious adverse event: {DEEP} ("
        deep = {f"{section}#{c.order}" for c in chunks if sentence in c.text}
        assert deep and min(int(d.rsplit("#", 1)[1]) for d in deep) >= len(chunks) // 2
        retriever = Retriever(kb)
        # a word only the title holds reaches every chunk of the section (BM25 counts titles)
        by_title = retriever.search_many(["Zorblimab psoriasis"], 200, "lexical",
                                         where={"nct_id": NCT})[0]
        assert {f"{section}#{c.order}" for c in chunks} <= {p.id for p in by_title}
        for mode in ("hybrid", "lexical"):
            found = retriever.search_many(
                [f"Which participants had the serious adverse event {DEEP.lower()}?"], 4,
                mode, where={"nct_id": NCT})[0]
            assert deep & {p.id for p in found}, mode
