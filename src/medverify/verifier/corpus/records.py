"""The corpus's records: labels and edit types per family, documents, pairs, candidates.

A candidate is a pair before its evidence is drawn; :class:`CandidatePools` holds them per edit
type, each type up to its cap.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

LABELS = ("SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO")
SUPPORTED_TYPES = ("extract", "clause_drop", "fusion", "abbreviation", "synonym")
CONTRADICTED_TYPES = (
    "negation",
    "number",
    "unit",
    "dose_frequency",
    "population",
    "drug_swap",
    "condition_swap",
    "direction",
    "temporal_causal",
    "quantifier",
)
NEI_TYPES = ("bm25_hard", "same_doc_other", "sentence_removed")
FAMILIES = {
    "SUPPORTED": ("supported", SUPPORTED_TYPES),
    "CONTRADICTED": ("contradicted", CONTRADICTED_TYPES),
    "NOT_ENOUGH_INFO": ("nei", NEI_TYPES),
}


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class Document:
    """A source document: sentences in order, the paragraph of each, and its split group."""

    doc_id: str
    source: str
    group: str
    sentences: tuple[str, ...]
    paras: tuple[int, ...]
    focus: str = ""
    synonyms: tuple[str, ...] = ()


@dataclass(frozen=True)
class CorpusPair:
    """One generated (claim, evidence, label) pair with its provenance."""

    id: str
    claim: str
    evidence: str
    label: str
    generator: str
    edit_type: str
    source: str
    doc_id: str
    group: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class Lexicons:
    """Same-type entity names (lower case) for drug and condition swaps."""

    drugs: list[str] = field(default_factory=list)
    conditions: list[str] = field(default_factory=list)


@dataclass
class Candidate:
    """A pair before its evidence is drawn: the claim (or an edit still to apply) and where."""

    edit_type: str
    doc: int
    lo: int
    hi: int
    claim: str
    exclude: int = -1
    span: tuple[int, int] | None = None  # entity span for drug/condition swaps


# ---------------------------------------------------------------- text helpers


class CandidatePools:
    """Candidates per edit type, each type up to its cap (later ones are not kept)."""

    def __init__(self, caps: dict[str, int]) -> None:
        self.caps = caps
        self.pools: dict[str, list[Candidate]] = {t: [] for t in caps}

    def full(self, kind: str) -> bool:
        """True once ``kind`` holds its cap of candidates."""
        return len(self.pools[kind]) >= self.caps[kind]

    def add(self, cand: Candidate) -> None:
        """Keep ``cand`` in the pool of its edit type unless that pool is full."""
        if not self.full(cand.edit_type):
            self.pools[cand.edit_type].append(cand)
