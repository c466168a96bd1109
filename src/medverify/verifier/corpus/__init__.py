"""A large synthetic medical NLI corpus for the built-in verifier, built from allowed text.

Documents (MedQuAD answers, PubMedQA abstracts, the retrieval corpora, the evidence texts of
the allowed train pair files; :mod:`.sources`) are cut into sentences; each sentence (or pair of
adjacent sentences) yields candidate (claim, evidence, label) pairs of three families:

- ``supported`` (:mod:`.supported`): the sentence restated (verbatim, a leading/trailing clause
  dropped, two adjacent sentences fused, an abbreviation or synonym swapped using a definition
  from the same document, which the evidence then contains); hedges are kept as they are.
- ``contradicted`` (:mod:`.contradicted`, quantity edits in :mod:`.quantities`, drug/condition
  swaps in :mod:`.entities`): exactly one typed edit (:data:`CONTRADICTED_TYPES`).
- ``nei`` (:mod:`.nei`): a BM25 hard negative from another document group, a window of the same
  document about something else, or the document around the sentence without the sentence
  itself; each evidence must lack the claim's key content (:func:`lacks_key_content`).

Evidence is a window of consecutive sentences (at most ``max_words`` words). Candidates are
drawn per label and per type with water-filled quotas (balanced where a type has enough
candidates), each pair is checked against a near-duplicate hash of the corpus and against the
dev/evaluation sets (:class:`LeakageIndex`) before it is accepted (:mod:`.build`). Everything is
seeded and deterministic (no iteration over sets of strings, no process-randomised hashes in
decisions). Dev/evaluation files are read only by :func:`load_eval_sets` (:mod:`.leakage`), for
the leakage check. Count tables and the gzip JSON lines output are in :mod:`.output`.
"""

from __future__ import annotations

from medverify.verifier.corpus.build import BuildResult, build_corpus
from medverify.verifier.corpus.contradicted import (
    EDITS,
    edit_direction,
    edit_negation,
    edit_population,
    edit_quantifier,
    edit_temporal_causal,
)
from medverify.verifier.corpus.entities import condition_name, drug_name
from medverify.verifier.corpus.leakage import EVAL_PAIR_FILES, LeakageIndex, load_eval_sets
from medverify.verifier.corpus.nei import PassageIndex, lacks_key_content
from medverify.verifier.corpus.output import (
    count_table,
    format_count_table,
    read_jsonl_gz,
    write_jsonl_gz,
)
from medverify.verifier.corpus.quantities import edit_dose_frequency, edit_number, edit_unit
from medverify.verifier.corpus.records import (
    CONTRADICTED_TYPES,
    FAMILIES,
    LABELS,
    NEI_TYPES,
    SUPPORTED_TYPES,
    Candidate,
    CorpusPair,
    Document,
    Lexicons,
)
from medverify.verifier.corpus.sources import (
    TRAIN_PAIR_FILES,
    document_idf,
    drop_boilerplate,
    load_medquad,
    load_pair_evidence,
    load_pubmedqa,
    load_retrieval,
    load_sources,
)
from medverify.verifier.corpus.supported import abbreviations, clause_drop, fuse, synonyms_of
from medverify.verifier.corpus.text import claimable, content_words, normalize, split_sentences

__all__ = [
    "CONTRADICTED_TYPES",
    "EDITS",
    "EVAL_PAIR_FILES",
    "FAMILIES",
    "LABELS",
    "NEI_TYPES",
    "SUPPORTED_TYPES",
    "TRAIN_PAIR_FILES",
    "BuildResult",
    "Candidate",
    "CorpusPair",
    "Document",
    "LeakageIndex",
    "Lexicons",
    "PassageIndex",
    "abbreviations",
    "build_corpus",
    "claimable",
    "clause_drop",
    "condition_name",
    "content_words",
    "count_table",
    "document_idf",
    "drop_boilerplate",
    "drug_name",
    "edit_direction",
    "edit_dose_frequency",
    "edit_negation",
    "edit_number",
    "edit_population",
    "edit_quantifier",
    "edit_temporal_causal",
    "edit_unit",
    "format_count_table",
    "fuse",
    "lacks_key_content",
    "load_eval_sets",
    "load_medquad",
    "load_pair_evidence",
    "load_pubmedqa",
    "load_retrieval",
    "load_sources",
    "normalize",
    "read_jsonl_gz",
    "split_sentences",
    "synonyms_of",
    "write_jsonl_gz",
]
