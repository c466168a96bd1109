"""The report of ``bench_trials_kb.py``: trials_kb.md from the results, in three parts."""

from __future__ import annotations

MB = 1024 * 1024


def markdown(r: dict) -> str:
    return "\n".join([*_ingest_part(r), *_minilm_part(r), *_search_part(r)])


def _ingest_part(r: dict) -> list[str]:
    """Title, machine, the hash-384 ingest (1a) and the head of 1b."""
    ing, enc = r["ingest_hash"], r["encoder"]
    ph = ing["phases_seconds"]
    lines = [
        f"# Trial KB at scale: ingest and search ({ing['studies']} synthetic studies)",
        "",
        f"Machine: {r['machine']}; torch threads {enc['torch_threads']}. Records are "
        f"**synthetic** (recombined from 7 real ClinicalTrials.gov samples, "
        f"`medverify.trials.synthetic`), N = {ing['studies']} studies -> "
        f"{ing['documents_added']} section documents. Command: `{r['command']}`. "
        f"Zip: {r['zip']['size_mb']} MB, written in {r['zip']['write_seconds']} s.",
        "",
        "## 1a. Ingest with hash-384 (measured, real ingest path)",
        "",
        "| studies | documents | chunks | seconds | docs/s | chunks/s | peak RSS MB "
        "| KB on disk MB |",
        "|---|---|---|---|---|---|---|---|",
        f"| {ing['studies']} | {ing['documents_added']} | {ing['chunks']} "
        f"| {ing['ingest_seconds']} | {ing['documents_per_s']} | {ing['chunks_per_s']} "
        f"| {ing['peak_rss_mb']} | {round(ing['kb_size_bytes'] / MB, 1)} |",
        "",
        "Phases (seconds, share of ingest):",
        "",
        "| phase | seconds | share |",
        "|---|---|---|",
    ]
    for name, value in ph.items():
        lines.append(f"| {name} | {value} | {value / ing['ingest_seconds']:.1%} |")
    points = ", ".join(f"{int(d)}: {t}s/{m}MB" for d, t, _, m in
                       ing["timeline_docs_seconds_chunks_rssmb"])
    lines += [
        "",
        f"Timeline (documents: elapsed / RSS): {points}.",
        f"KB files (bytes): {ing['kb_files_bytes']}.",
        "",
        "## 1b. MiniLM encoder (measured on a seeded sample) and estimated MiniLM ingest",
        "",
        "| measure | value |",
        "|---|---|",
        f"| sample | {enc['documents']} documents of {enc['trials_sampled']} studies, "
        f"{enc['minilm_chunks']} MiniLM chunks ({enc['minilm_windows']} encoder windows), "
        f"{enc['mean_chars_per_minilm_chunk']} chars/chunk |",
        f"| MiniLM encoder chunks/s (measured, batches of {enc['batch_texts_per_embed_call']}) "
        f"| {enc['minilm_chunks_per_s']} |",
        f"| hash-384 embed chunks/s (measured, same documents) | {enc['hash_chunks_per_s']} |",
        f"| chunks/doc MiniLM vs word tokenizer (measured) | "
        f"{enc['minilm_chunks_per_doc']:.3f} vs {enc['hash_chunks_per_doc']:.3f} |",
        f"| chunking ms/doc MiniLM vs word tokenizer (measured) | "
        f"{enc['minilm_chunking_s_per_doc'] * 1000:.3f} vs "
        f"{enc['hash_chunking_s_per_doc'] * 1000:.3f} |",
        "",
        "Estimate (all inputs measured): `T_minilm = (T_hash - E_hash) + D * (c_mini - "
        "c_word) + K_mini / R_mini`, where T_hash = hash-384 ingest seconds, E_hash = its "
        "embedding seconds (timed inside the ingest), D = documents, c = chunking seconds per "
        "document per tokenizer, K_mini = hash chunks x (MiniLM/word chunks per doc on the "
        "sample), R_mini = MiniLM encoder chunks/s. The 'basic' variant is "
        "`T_hash - K_hash / R_hash(sample) + K_mini / R_mini` (no tokenizer term).",
        "",
        "| studies | hash ingest s | basic estimate s | corrected estimate s | measured MiniLM "
        "ingest s | error (corrected) |",
        "|---|---|---|---|---|---|",
    ]
    return lines


def _minilm_part(r: dict) -> list[str]:
    """The MiniLM estimate against the measured slice (1b), the head of 2."""
    ing, srch = r["ingest_hash"], r["search"]
    sl = r["slice"]
    lines: list[str] = []
    e_sl, m_sl = sl["estimate"], sl["minilm"]
    err = (e_sl["corrected_seconds"] - m_sl["ingest_seconds"]) / m_sl["ingest_seconds"]
    lines.append(f"| {sl['studies']} (slice) | {e_sl['hash_ingest_seconds']} "
                 f"| {e_sl['basic_seconds']} | {e_sl['corrected_seconds']} "
                 f"| {m_sl['ingest_seconds']} | {err:+.1%} |")
    e_n = r["estimate_n"]
    lines.append(f"| {ing['studies']} | {e_n['hash_ingest_seconds']} | {e_n['basic_seconds']} "
                 f"| {e_n['corrected_seconds']} ({e_n['corrected_seconds'] / 3600:.2f} h) "
                 f"| not run | |")
    m_ph = m_sl["phases_seconds"]
    lines += [
        "",
        f"Error split on the slice: non-embedding part estimated {e_sl['non_embedding_seconds']}"
        f" s vs measured {round(m_sl['ingest_seconds'] - m_ph['embed'], 1)} s; encoder rate "
        f"{e_sl['minilm_chunks_per_s_used']} chunks/s on the sample vs "
        f"{round(m_sl['chunks'] / m_ph['embed'], 2)} inside the slice ingest; estimated "
        f"{e_sl['minilm_chunks_estimated']} chunks vs {m_sl['chunks']} stored.",
    ]
    earlier = r.get("reused_from") or {}
    if earlier.get("encoder") and earlier.get("slice"):
        old_enc, old_sl = earlier["encoder"], earlier["slice"]
        lines += [
            "",
            f"Parts 1a and 2 come from an earlier run (`{earlier['command']}`); its MiniLM "
            f"parts measured {old_enc['minilm_chunks_per_s']} chunks/s on the sample and "
            f"{old_sl['minilm']['chunks_per_s']} chunks/s in the slice ingest (estimate "
            f"{old_sl['estimate']['corrected_seconds']} s vs measured "
            f"{old_sl['minilm']['ingest_seconds']} s): the encoder rate moved with the "
            "machine's load between the two measurements.",
        ]
    lines += [
        "",
        f"Slice MiniLM ingest (measured): {m_sl['chunks']} chunks, {m_sl['chunks_per_s']} "
        f"chunks/s, phases {m_sl['phases_seconds']}, peak RSS {m_sl['peak_rss_mb']} MB "
        f"(model load {m_sl['embedder_load_seconds']} s, not in the ingest time).",
        "",
        f"## 2. Search latency over the {srch['chunks']}-chunk hash-384 KB (measured, k=7, "
        f"{srch['queries']} queries, {srch['queries_with_number_changed']} with a number "
        "changed; query embedding excluded)",
        "",
        "| measure | p50 ms | p95 ms |",
        "|---|---|---|",
    ]
    return lines


def _search_part(r: dict) -> list[str]:
    """Search latency (2), the extrapolation (3) and the notes."""
    srch, ex = r["search"], r["extrapolation"]
    lines: list[str] = []
    for key in ("hybrid_without_embedding", "lexical_only", "dense_only_without_embedding",
                "minilm_query_embedding", "hash_query_embedding"):
        row = srch[key]
        lines.append(f"| {key} | {row['p50_ms']} | {row['p95_ms']} |")
    hyb = srch["hybrid_without_embedding"]["p50_ms"] + srch["minilm_query_embedding"]["p50_ms"]
    lines += [
        "",
        f"Hybrid with MiniLM query embedding ~ {hyb:.1f} ms p50 (sum of the two p50s). "
        f"Open + warm-up (faiss index load): {srch['open_and_warm_up_seconds']} s; "
        f"search peak RSS {srch['peak_rss_mb_search']} MB.",
        "",
        "## 3. Extrapolation (arithmetic over the numbers above)",
        "",
        f"- read+curate (measured, trials_read.json): "
        f"{ex['read_curate_studies_per_s_measured_trials_read_json']} studies/s -> "
        f"{ex['read_curate_hours_520k_estimated']} h for 520k (estimated).",
        f"- hash-384 ingest: {ex['hash_ingest_s_per_study_measured']} s/study overall, "
        f"{ex['hash_ingest_s_per_study_last_decile_measured']} s/study in the last tenth "
        "(measured); studies beyond N are costed at the last-tenth rate.",
        f"- MiniLM ingest: {ex['minilm_ingest_s_per_study_estimated']} s/study (estimated); "
        f"serial part (SQLite store + admit + faiss add + index save, measured in the hash "
        f"run): {ex['serial_s_per_study_measured']} s/study = "
        f"{ex['serial_share_of_minilm_ingest_estimated']:.1%} of it; the rest (read, curate, "
        "chunk, embed) splits across machines by NCT-id range / zip members.",
        "",
        "| studies | hash-384 h, 1 machine | MiniLM h, 1 machine | MiniLM h, M = 2 / 4 / 8 "
        "/ 16 / 32 | KB GB | faiss flat RAM GB | dense p50 ms (linear) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label in ("520k", "68k_with_results"):
        x = ex[label]
        ms = " / ".join(str(x["minilm_hours_on_M_machines_estimated"][m])
                        for m in ("2", "4", "8", "16", "32"))
        lines.append(f"| {label} | {x['hash384_hours_one_machine_estimated']} "
                     f"| {x['minilm_hours_one_machine_estimated']} | {ms} | {x['kb_gb_estimated']} "
                     f"| {x['faiss_flat_ram_gb_estimated']} "
                     f"| {x['dense_p50_ms_estimated_linear']} |")
    lines += ["", "Notes:", "", *[f"- {note}" for note in r["notes"]], ""]
    return lines
