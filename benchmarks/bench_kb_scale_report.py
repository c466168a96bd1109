"""The report of ``bench_kb_scale.py``: kb_scale.md from the results JSON, one function
per section."""

from __future__ import annotations

from typing import Any


def markdown(r: dict[str, Any]) -> str:
    return "\n".join([*_head(r), *_build(r), *_search(r), *_minilm(r), *_notes(r)]) + "\n"


def _head(r: dict[str, Any]) -> list[str]:
    """The title and the machine."""
    m = r["machine"]
    lines = [f"# A KB of {r['n']:,} passages: index choice, memory, latency, recall", "",
             f"Machine: {m['cpus']} CPUs visible (shared with other jobs; load average "
             f"{m['load_before']} before, {m['load_after']} after), {m['python']}, faiss "
             f"{m['faiss']}. Command: `{r['command']}`. Passages are **synthetic** "
             "(`benchmarks/make_large_corpus.py`: real sentences of MedQuAD, Check-COVID "
             "and Citation-Integrity, reshuffled; labelled `synthetic: true`). Query "
             f"embedding excluded from every latency; {r['search']['queries']} real claims "
             "(Check-COVID and Citation-Integrity dev) as queries; k = 7, hybrid fuses the "
             "top 50 of each side. Latencies are single queries on one faiss thread.", ""]
    return lines


def _build(r: dict[str, Any]) -> list[str]:
    """The build table and the ingest slice."""
    lines: list[str] = []
    b, ri = r["build"], r["reindex"]
    files = b["files"]
    lines += ["## Build", "",
              "| step | seconds | peak RSS MB | on disk MB |", "|---|---|---|---|",
              f"| write {r['n']:,} passages into the KB schema (SQLite rows, FTS5, term counts, "
              f"hash-384 vectors) | {b['seconds']} | {b['peak_rss_mb']} | "
              f"{sum(files.values()) / 1e6:.0f} (kb.sqlite) |",
              f"| reindex: {ri['approximate']['spec']} (train + add, from SQLite) | "
              f"{ri['approximate']['seconds']} | {ri['approximate']['peak_rss_mb']} | "
              f"{ri['approximate']['file_bytes'] / 1e6:.0f} (vectors.faiss) |",
              f"| flat index for the exact baseline | {ri['flat']['seconds']} | | "
              f"{ri['flat']['file_bytes'] / 1e6:.0f} |",
              f"| reopen + load the index memory-mapped | {ri['reopen']['seconds']} | "
              f"{ri['reopen']['rss_mb']} (RSS after) | |", ""]
    if "ingest_slice" in r:
        s = r["ingest_slice"]
        lines += [f"The real ingest path (`KnowledgeBase.ingest`, hash-384) on the first "
                  f"{s['passages']:,} passages: {s['seconds']} s, {s['passages_per_s']} "
                  f"passages/s, index {s['index']}, peak RSS {s['peak_rss_mb']} MB; at that "
                  f"rate {r['n']:,} passages take {r['n'] / s['passages_per_s'] / 60:.0f} min "
                  "(extrapolated, on this loaded machine).", ""]
    return lines


def _search(r: dict[str, Any]) -> list[str]:
    """Search latency and recall over the big KB."""
    lines: list[str] = []
    sr = r["search"]
    lines += [f"## Search over the {r['n']:,}-passage KB (hash-384 vectors)", ""]
    if "search_only" in r:
        load = f"{sr['load_before'][0]:.2f} before, {sr['load_after'][0]:.2f} after"
        busy = " (above 3: latencies inflated)" if max(sr["load_before"][0],
                                                        sr["load_after"][0]) > 3 else ""
        prev = r["search_previous"]["modes"]
        lines += [f"This search is a rerun of the search stage alone "
                  f"({r['search_only']['date']}: `{r['search_only']['command']}`) on the KB "
                  f"built above, with the default lexical ranking (stored postings "
                  f"{sr.get('lexical_postings', 'off')}); load average {load}{busy}. The build, "
                  "reindex, ingest and MiniLM sections are from the earlier full run. The "
                  "earlier search (bounded lexical ranking on, `search_previous` in the JSON): "
                  f"hybrid p50 {prev['hybrid_rank']['p50']} / p95 {prev['hybrid_rank']['p95']} "
                  f"ms, lexical candidates {prev['lexical_candidates_50']['p50']} / "
                  f"{prev['lexical_candidates_50']['p95']} ms.", ""]
    lines += [
              f"Index {sr['index']}, memory-mapped: {sr['mapped']}; open + first load "
              f"{sr['open_ms']} ms; memory after open {sr['memory_after_open_mb']}; at the end "
              f"{sr['memory_end_mb']}, peak RSS {sr['peak_rss_mb']} MB (includes the exact "
              "index and the page cache mapped for the comparison).", "",
              "| mode | p50 ms | p95 ms |", "|---|---|---|",
              f"| dense, exact flat scan (depth 50) | {sr['dense_exact']['p50']} | "
              f"{sr['dense_exact']['p95']} |"]
    for row in sr["dense_approx"]:
        lines.append(f"| dense, IVF nprobe {row['param']} (depth 50): recall@10 "
                     f"{row['recall_at_10']} | {row['p50']} | {row['p95']} |")
    lex = sr.get("lexical_settings", {"lexical_bounded_from": 100_000,
                                      "lexical_postings_from": None})
    if lex["lexical_postings_from"] is not None and sr.get("lexical_postings") == "fresh":
        ranking = "stored postings: bm25 in numpy, equal to bm25()"
    elif lex["lexical_bounded_from"] is not None:
        ranking = "bounded rank query past 1,000 postings"
    else:
        ranking = "FTS5 bm25()"
    names = {"lexical_candidates_50": f"lexical candidates (depth 50; {ranking})",
             "lexical_rank": "lexical, k=7 (Retriever)",
             "dense_rank": f"dense, k=7 (Retriever, nprobe {r['nprobe']})",
             "hybrid_rank": f"hybrid = dense + lexical + fusion (nprobe {r['nprobe']})",
             "hybrid_search": "hybrid + fetching the 7 passages"}
    for key, label in names.items():
        lines.append(f"| {label} | {sr['modes'][key]['p50']} | {sr['modes'][key]['p95']} |")
    lines += [f"| hybrid on the exact flat index (before) | "
              f"{sr['hybrid_rank_exact_index']['p50']} | "
              f"{sr['hybrid_rank_exact_index']['p95']} |",
              f"| query embedding, hash-384 (excluded above) | {sr['query_embed_ms_hash']} | |",
              "", "Slowest lexical queries: " + "; ".join(
                  f"{x['ms']} ms ({x['query'][:60]}...)" for x in sr["slowest_lexical"]), ""]
    return lines


def _minilm(r: dict[str, Any]) -> list[str]:
    """Recall over real MiniLM vectors (when measured)."""
    lines: list[str] = []
    if "minilm" in r:
        mm = r["minilm"]
        lines += ["## Recall over real MiniLM vectors (index level)", "",
                  f"all-MiniLM-L6-v2 embedded {mm['pool_sentences']:,} real sentences (a "
                  "seeded subset of the pool: whole documents); `sentences` is that set of "
                  f"real embeddings itself; `passages` is {r['n']:,} synthetic passages drawn "
                  "from it the same way as the KB's, each vector the normalised mean of its "
                  "sentences' MiniLM vectors. Queries embedded with MiniLM.", "",
                  "| set | vectors | index | build s | param | recall@10 | p50 ms | p95 ms |",
                  "|---|---|---|---|---|---|---|---|"]
        for name in ("sentences", "passages"):
            row = mm[name]
            lines.append(f"| {name} | {row['vectors']:,} | flat (exact) | | | 1.0 | "
                         f"{row['dense_exact']['p50']} | {row['dense_exact']['p95']} |")
            for kind in ("ivf", "ivfpq", "hnsw"):
                if kind not in row:
                    continue
                for sw in row[kind]["sweep"]:
                    label = "efSearch" if kind == "hnsw" else "nprobe"
                    lines.append(f"| {name} | {row['vectors']:,} | {row[kind]['spec']} | "
                                 f"{row[kind]['build_s']} | {label} {sw['param']} | "
                                 f"{sw['recall_at_10']} | {sw['p50']} | {sw['p95']} |")
        lines.append("")
    return lines


def _notes(r: dict[str, Any]) -> list[str]:
    """The notes and the earlier search runs."""
    lines: list[str] = []
    lines += ["## Notes", ""] + [f"- {note}" for note in r.get("notes", [])]
    for key, label in (("search_first_run", "First search run"),
                       ("search_second_run", "Second search run")):
        run = r.get(key)
        if run:
            modes = run["modes"]
            lines.append(
                f"- {label} (load {run.get('load_avg', 'see command')}): hybrid p50 "
                f"{modes['hybrid_rank']['p50']} / p95 {modes['hybrid_rank']['p95']} ms, lexical "
                f"{modes['lexical_rank']['p50']} / {modes['lexical_rank']['p95']}, dense exact "
                f"{run['dense_exact']['p50']}, hybrid on the exact index "
                f"{run['hybrid_rank_exact_index']['p50']}.")
    for key in sorted(k for k in r if k.startswith("search_") and k not in (
            "search_first_run", "search_second_run", "search_previous", "search_only")):
        run = r[key]
        modes = run["modes"]
        lines.append(
            f"- `{key}` ({run['date']}: `{run['command']}`; load {run['load_before'][0]:.2f} "
            f"before, {run['load_after'][0]:.2f} after): hybrid p50 "
            f"{modes['hybrid_rank']['p50']} / p95 {modes['hybrid_rank']['p95']} ms, lexical "
            f"candidates {modes['lexical_candidates_50']['p50']} / "
            f"{modes['lexical_candidates_50']['p95']} ms, dense (k = 7) "
            f"{modes['dense_rank']['p50']} ms.")
    return lines
