"""Issue 31: are trial summaries still searchable by trial and section now that a section
can be long? Measured on the shipped sample records (and the longest synthetic records).

    .venv/bin/python benchmarks/bench_trials_retrieval.py [--embedder all-MiniLM-L6-v2]
        [--k 4] [--synthetic 2000] [--longest 2]

Builds a trial KB (``KnowledgeBase.create`` with the default settings: 512-token chunks,
100 overlap, hybrid search; the default MiniLM embedder, or ``hash`` when it cannot be
loaded offline, said in the results) from the 7 sample records (../shared/data/raw/
clinicaltrials or $MEDVERIFY_TRIALS_SAMPLES) and the ``--longest`` records with the longest
summaries among ``synthetic_studies(--synthetic, 0, variants=True)`` (the samples' sections
are at most 7.4k characters; a synthetic one reaches 137k). Then, filtered to the trial with
``where={"nct_id": ...}`` (``Retriever.search_many``), top ``--k`` passages (the study's
``[trials] evidence_k``, 4; also counted at the KB's ``top_k``, 7):

* **section hits**: each of CHECK's 15 questions (its text as the query) against each
  record: is a chunk of the section that answers it (``<NCT>#<section>``) in the top k?
* **fact hits**: facts picked from the record (each serious adverse event term, each
  primary and each other outcome measure's title, each non-serious event term the summary
  lists; at most ``--per-kind`` of each kind per record, evenly spread over the list so
  the last ones are included) with a query naming it: is a chunk of the section that
  holds the fact, containing the fact's text, in the top k? ``deep`` facts are those
  whose first chunk in their section is the third or later.

Each is counted twice from the same ranking (the top ``DEPTH`` chunks): as the search
returns it (``chunks``: several chunks of one long section can fill the top k), and keeping
only each section's best chunk (``per section``: what a search that returned k distinct
sections would give; the KB's search does not do this). Every chunk of a section is stored
with its document's title (``<NCT> <brief title>: <section>``), which is embedded with the
chunk and counted by BM25, so the section's name and the trial id reach every chunk.
Writes benchmarks/results/trials_retrieval.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "src"))

from medverify.config import KBSettings, RetrievalSettings, TrialStudySettings  # noqa: E402
from medverify.kb import KnowledgeBase  # noqa: E402
from medverify.kb.embed import Embedder, get_embedder  # noqa: E402
from medverify.records import Passage  # noqa: E402
from medverify.retrieve import Retriever  # noqa: E402
from medverify.study.questions import QUESTIONS  # noqa: E402
from medverify.trials.curate import curate, slug, summary_documents  # noqa: E402
from medverify.trials.summary import text_of  # noqa: E402
from medverify.trials.synthetic import (  # noqa: E402
    default_samples_dir,
    load_samples,
    synthetic_studies,
)

DEEP_ORDER = 2  # a fact whose first chunk in its section has this order or later is "deep"
DEPTH = 60  # chunks ranked per query (both views are cut from this ranking)
VIEWS = ("chunks", "per section")


@dataclass(frozen=True)
class Fact:
    kind: str
    section: str
    needle: str
    query: str


def _spread(items: list[str], most: int) -> list[str]:
    """At most ``most`` of ``items``, evenly spaced, first and last included."""
    unique = list(dict.fromkeys(i for i in items if i))
    if len(unique) <= most:
        return unique
    return [unique[round(i * (len(unique) - 1) / (most - 1))] for i in range(most)]


def record_facts(study: dict[str, Any], per_kind: int) -> list[Fact]:
    """Facts a clinician would look up in a record's summary, with a query naming each."""
    results = study.get("resultsSection") or {}
    events = results.get("adverseEventsModule") or {}
    measures = (results.get("outcomeMeasuresModule") or {}).get("outcomeMeasures") or []

    def terms(key: str) -> list[str]:
        return [text_of(e.get("term") or "") for e in events.get(key) or []]

    def titles(primary: bool) -> list[str]:
        return [text_of(m.get("title") or "") for m in measures
                if (m.get("type") == "PRIMARY") == primary]

    facts = [Fact("serious event", "serious adverse events", t,
                  f"Which participants had the serious adverse event {t}?")
             for t in _spread(terms("seriousEvents"), per_kind)]
    facts += [Fact("non-serious event", "non-serious adverse events", t,
                   f"How many participants had {t} as a non-serious adverse event?")
              for t in _spread(terms("otherEvents"), per_kind)]
    facts += [Fact("primary result", "primary outcome results", t,
                   f"What were the results for the primary outcome {t}?")
              for t in _spread(titles(True), per_kind)]
    facts += [Fact("other result", "secondary outcome key results", t,
                   f"What were the results for the outcome {t}?")
              for t in _spread(titles(False), per_kind)]
    return facts


def pick_records(n_synthetic: int, longest: int) -> list[dict[str, Any]]:
    samples = load_samples(default_samples_dir())
    if not longest:
        return samples
    sized = []
    for study in synthetic_studies(n_synthetic, 0, samples, variants=True):
        summary = curate(study)
        sized.append((sum(len(s.text) for sec in summary.sections for s in sec.sentences),
                      summary.nct_id, study))
    sized.sort(key=lambda t: (-t[0], t[1]))
    return samples + [study for _, _, study in sized[:longest]]


def build_kb(path: Path, records: Iterable[dict[str, Any]],
             embedder: Embedder) -> tuple[KnowledgeBase, float]:
    start = time.perf_counter()
    kb = KnowledgeBase.create(path, KBSettings(), embedder, RetrievalSettings())
    kb.ingest(d for study in records for d in summary_documents(curate(study), study))
    return kb, time.perf_counter() - start


def _doc_chunks(kb: KnowledgeBase, nct_id: str) -> tuple[dict[str, list[str]], int]:
    """Each section document's chunk texts, in order, and the summary's characters."""
    subset = kb.subset({"doc_id_prefix": f"{nct_id}#"})
    out: dict[str, list[tuple[int, str]]] = {}
    ends: dict[str, int] = {}
    for chunk in subset.chunks:
        out.setdefault(chunk.doc_id, []).append((chunk.order, chunk.text))
        ends[chunk.doc_id] = max(ends.get(chunk.doc_id, 0), chunk.end)
    return {doc: [t for _, t in sorted(rows)] for doc, rows in out.items()}, sum(ends.values())


def _views(ranked: list[Passage]) -> dict[str, list[Passage]]:
    """The ranking as returned, and with only each document's best chunk."""
    seen: set[str] = set()
    best = []
    for p in ranked:
        if p.doc_id not in seen:
            seen.add(p.doc_id)
            best.append(p)
    return {"chunks": ranked, "per section": best}


def measure_record(retriever: Retriever, kb: KnowledgeBase, study: dict[str, Any],
                   ks: tuple[int, ...], per_kind: int) -> dict[str, Any]:
    nct_id = study["protocolSection"]["identificationModule"]["nctId"]
    chunks, chars = _doc_chunks(kb, nct_id)
    where = {"nct_id": nct_id}
    section_ranked = retriever.search_many([q.text for q in QUESTIONS], DEPTH, where=where)
    sections: dict[str, dict[str, list[bool]]] = {view: {} for view in VIEWS}
    for q, ranked in zip(QUESTIONS, section_ranked, strict=True):
        doc = f"{nct_id}#{slug(q.section)}"
        for view, passages in _views(ranked).items():
            for k in ks:
                sections[view].setdefault(str(k), []).append(
                    doc in {p.doc_id for p in passages[:k]})
    facts, missing = [], 0
    for fact in record_facts(study, per_kind):
        doc = f"{nct_id}#{slug(fact.section)}"
        holding = [i for i, text in enumerate(chunks.get(doc, []))
                   if fact.needle.lower() in text.lower()]
        if not holding:
            missing += 1  # not in any chunk of its section (a capped list): not searchable
            continue
        facts.append((fact, doc, holding[0]))
    ranked_facts = retriever.search_many([f.query for f, _, _ in facts], DEPTH, where=where)
    fact_rows = []
    for (f, doc, first), ranked in zip(facts, ranked_facts, strict=True):
        row: dict[str, Any] = {"kind": f.kind, "needle": f.needle, "chunk": first,
                               "chunks_in_section": len(chunks[doc])}
        for view, passages in _views(ranked).items():
            for k in ks:
                row[f"{view}@{k}"] = any(p.doc_id == doc and f.needle.lower() in p.text.lower()
                                         for p in passages[:k])
        fact_rows.append(row)
    sizes = [len(t) for texts in chunks.values() for t in texts]
    return {"nct_id": nct_id, "sections": sections,
            "missed_sections": {str(k): [q.section for q, hit in
                                         zip(QUESTIONS, sections["chunks"][str(k)], strict=True)
                                         if not hit] for k in ks},
            "facts": fact_rows, "facts_not_in_section": missing,
            "chunks": len(sizes), "documents": len(chunks), "summary_chars": chars,
            "longest_section_chunks": max(len(t) for t in chunks.values()),
            "chunk_chars_mean": round(statistics.fmean(sizes)), "chunk_chars_max": max(sizes)}


def _rate(hits: list[bool]) -> dict[str, Any]:
    return {"hits": sum(hits), "n": len(hits),
            "rate": round(sum(hits) / len(hits), 3) if hits else None}


def summarise(rows: list[dict[str, Any]], ks: tuple[int, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    facts = [f for r in rows for f in r["facts"]]
    for view in VIEWS:
        for k in ks:
            key = f"{view}@{k}"
            out[key] = {
                "section": _rate([h for r in rows for h in r["sections"][view][str(k)]]),
                "fact": _rate([f[key] for f in facts]),
                "fact_deep": _rate([f[key] for f in facts if f["chunk"] >= DEEP_ORDER]),
                "fact_by_kind": {kind: _rate([f[key] for f in facts if f["kind"] == kind])
                                 for kind in sorted({f["kind"] for f in facts})},
            }
    return out


def run(records: list[dict[str, Any]], embedder: Embedder, ks: tuple[int, ...],
        per_kind: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        kb, seconds = build_kb(Path(tmp) / "kb", records, embedder)
        try:
            retriever = Retriever(kb)
            rows = [measure_record(retriever, kb, study, ks, per_kind) for study in records]
        finally:
            kb.close()
    return {"ingest_s": round(seconds, 1), "records": rows,
            "samples": summarise([r for r in rows if not r["nct_id"].startswith("NCT9")], ks),
            "synthetic": summarise([r for r in rows if r["nct_id"].startswith("NCT9")], ks),
            "all": summarise(rows, ks)}


def load_embedder(name: str) -> tuple[Embedder, str]:
    try:
        return get_embedder(name), ""
    except Exception as exc:  # any failure to load means: fall back, and say so
        return get_embedder("hash"), f"{name} could not be loaded ({exc}); used hash"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedder", default=KBSettings().embedder)
    parser.add_argument("--k", type=int, default=TrialStudySettings().evidence_k)
    parser.add_argument("--synthetic", type=int, default=2000)
    parser.add_argument("--longest", type=int, default=2)
    parser.add_argument("--per-kind", type=int, default=25)
    args = parser.parse_args(argv)
    ks = tuple(sorted({args.k, RetrievalSettings().top_k}))
    embedder, note = load_embedder(args.embedder)
    records = pick_records(args.synthetic, args.longest)
    out = {"embedder": embedder.id, "embedder_note": note, "ks": ks,
           "chunk_tokens": KBSettings().chunk_tokens, "overlap": KBSettings().chunk_overlap,
           "synthetic_set": {"n": args.synthetic, "seed": 0, "longest": args.longest},
           "per_kind": args.per_kind, "python": platform.python_version(),
           **run(records, embedder, ks, args.per_kind)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "trials_retrieval.json").write_text(json.dumps(out, indent=1) + "\n")
    (RESULTS / "trials_retrieval.md").write_text(markdown(out))
    print(markdown(out))


def _fmt(rate: dict[str, Any]) -> str:
    if not rate["n"]:
        return "-"
    return f"{rate['hits']}/{rate['n']} ({rate['rate']:.0%})"


def markdown(out: dict[str, Any]) -> str:
    ks = out["ks"]
    note = f" ({out['embedder_note']})" if out["embedder_note"] else ""
    synthetic = out["synthetic_set"]
    lines = ["# Trial summary retrieval (issue 31)", "",
             f"Embedder `{out['embedder']}`{note}; {out['chunk_tokens']}-token chunks, "
             f"{out['overlap']} overlap; hybrid search filtered with "
             "`where={\"nct_id\": ...}`; the 7 sample records and the "
             f"{synthetic['longest']} longest of {synthetic['n']} synthetic "
             f"records with variants (seed 0); ingest {out['ingest_s']} s. "
             "`benchmarks/bench_trials_retrieval.py`. `chunks`: the top k as searched; "
             "`per section`: the best chunk of each of the top k sections (not what the "
             "search returns).", "",
             "| records | view | k | section hits (15 questions) | fact hits | deep facts "
             "(3rd chunk on) |", "|---|---|---|---|---|---|"]
    for group in ("samples", "synthetic"):
        for view in VIEWS:
            for k in ks:
                s = out[group][f"{view}@{k}"]
                lines.append(f"| {group} | {view} | {k} | {_fmt(s['section'])} | "
                             f"{_fmt(s['fact'])} | {_fmt(s['fact_deep'])} |")
    kinds = _kinds(out)
    lines += ["", "Fact hits by kind (all records):", "",
              "| view | k | " + " | ".join(kinds) + " |", "|---|---|" + "---|" * len(kinds)]
    for view in VIEWS:
        for k in ks:
            by = out["all"][f"{view}@{k}"]["fact_by_kind"]
            lines.append(f"| {view} | {k} | "
                         + " | ".join(_fmt(by[kind]) if kind in by else "-" for kind in kinds)
                         + " |")
    k = ks[0]
    lines += ["", f"Per record (`chunks`, k={k}):", "",
              "| record | summary chars | chunks | longest section (chunks) | "
              "chunk chars mean / max | section hits | missed sections | fact hits | "
              "deep fact hits | facts not in their section |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in out["records"]:
        secs = r["sections"]["chunks"][str(k)]
        facts = [f[f"chunks@{k}"] for f in r["facts"]]
        deep = [f[f"chunks@{k}"] for f in r["facts"] if f["chunk"] >= DEEP_ORDER]
        lines.append(
            f"| {r['nct_id']} | {r['summary_chars']:,} | {r['chunks']} | "
            f"{r['longest_section_chunks']} | {r['chunk_chars_mean']} / "
            f"{r['chunk_chars_max']} | {sum(secs)}/{len(secs)} | "
            f"{'; '.join(r['missed_sections'][str(k)]) or '-'} | "
            f"{sum(facts)}/{len(facts)} | {sum(deep)}/{len(deep)} | "
            f"{r['facts_not_in_section']} |")
    return "\n".join(lines) + "\n"


def _kinds(out: dict[str, Any]) -> list[str]:
    return sorted({kind for key in out["all"] for kind in out["all"][key]["fact_by_kind"]})


if __name__ == "__main__":
    main()
