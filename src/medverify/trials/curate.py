"""Deterministic curation of a ClinicalTrials.gov (API v2) study record into CHECK's
15-section structured summary (plus a baseline-characteristics section), and its
knowledge-base passages.

Every sentence is a plain template filled from named registry fields. Text values are
copied with the registry's markdown escapes undone and their whitespace collapsed; numbers
(counts, percentages, p-values, limits, units, time frames, group titles) are copied exactly
as the registry writes them, never parsed, rounded or recomputed; registry enum codes
(``PLACEBO_COMPARATOR``) are written in lower case with spaces (``placebo comparator``),
phases with the registry's labels (``PHASE2`` -> ``Phase 2``, ``NA`` -> ``Not Applicable``);
dates say whether the registry marks them actual or estimated. Each sentence carries the JSON
pointers of the fields it used. A section the record cannot fill says so in one sentence with
no pointers. Only a few lists are capped (``MAX_LIST``, ``MAX_EVENTS``); a capped list ends
with a note saying how many of how many are shown and naming (or counting) the others. See
``docs/trials.md``.

The records, :class:`~medverify.trials.summary.Line` and the ``MAX_*`` caps are in
:mod:`medverify.trials.summary`; the builders, one module per section or group of sections,
in :mod:`medverify.trials.sections`. Here: :func:`curate`, :func:`group_problems`, the
knowledge-base passages of a summary and the selection of studies.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from medverify.records import Document
from medverify.trials.sections import BUILDERS
from medverify.trials.summary import (
    AE,
    ALL_SECTIONS,
    ARMS,
    BASELINE,
    DESIGN,
    FLOW,
    IDENT,
    MEASURES,
    SECTIONS,
    STATUS,
    Line,
    P,
    Section,
    TrialSummary,
    text_of,
)

__all__ = [
    "ALL_SECTIONS",
    "SECTIONS",
    "STUDY_URL",
    "TrialSummary",
    "curate",
    "group_problems",
    "iter_summary_documents",
    "matches",
    "select_studies",
    "slug",
    "study_meta",
    "summary_documents",
]

STUDY_URL = "https://clinicaltrials.gov/study/{}"


def curate(study: dict[str, Any]) -> TrialSummary:
    """The summary of one API v2 study record: the 15 question sections (:data:`SECTIONS`),
    then the extra ones (:data:`~medverify.trials.summary.EXTRA_SECTIONS`)."""
    line = Line(study)
    nct_id = text_of(line.get((*IDENT, "nctId")) or "")
    title = text_of(line.get((*IDENT, "briefTitle")) or line.get((*IDENT, "officialTitle")) or "")
    sections = [Section(name=name, sentences=build(study))
                for name, build in zip(ALL_SECTIONS, BUILDERS, strict=True)]
    return TrialSummary(nct_id=nct_id, title=title, sections=sections,
                        problems=group_problems(study))


def group_problems(study: dict[str, Any]) -> list[str]:
    """Result rows that name a group their module does not list (the registry's group ids
    are per module: ``FG``/``OG``/``EG``). Such a row is still written, without a group
    title; each one is reported here, never a crash."""
    line = Line(study)
    problems: list[str] = []

    def check(where: str, known: set[Any], refs: list[Any]) -> None:
        bad = sorted({str(r) for r in refs if r is not None and r not in known})
        if bad:
            problems.append(f"{where}: group id(s) {', '.join(bad[:5])} not among the "
                            f"{len(known)} groups listed")

    flow = {g.get("id") for g in line.get((*FLOW, "groups")) or [] if isinstance(g, dict)}
    for p, period in enumerate(line.get((*FLOW, "periods")) or []):
        if not isinstance(period, dict):
            continue
        refs = [a.get("groupId") for m in period.get("milestones") or [] if isinstance(m, dict)
                for a in m.get("achievements") or [] if isinstance(a, dict)]
        refs += [r.get("groupId") for w in period.get("dropWithdraws") or []
                 if isinstance(w, dict) for r in w.get("reasons") or [] if isinstance(r, dict)]
        check(f"participant flow period {p}", flow, refs)
    for m, measure in enumerate(line.get(MEASURES) or []):
        if not isinstance(measure, dict):
            continue
        known = {g.get("id") for g in measure.get("groups") or [] if isinstance(g, dict)}
        refs = [c.get("groupId") for d in measure.get("denoms") or [] if isinstance(d, dict)
                for c in d.get("counts") or [] if isinstance(c, dict)]
        refs += [x.get("groupId") for k in measure.get("classes") or [] if isinstance(k, dict)
                 for c in k.get("categories") or [] if isinstance(c, dict)
                 for x in c.get("measurements") or [] if isinstance(x, dict)]
        refs += [g for a in measure.get("analyses") or [] if isinstance(a, dict)
                 for g in a.get("groupIds") or []]
        check(f"outcome measure {m}", known, refs)
    baseline = {g.get("id") for g in line.get((*BASELINE, "groups")) or []
                if isinstance(g, dict)}
    refs = [c.get("groupId") for d in line.get((*BASELINE, "denoms")) or [] if isinstance(d, dict)
            for c in d.get("counts") or [] if isinstance(c, dict)]
    refs += [x.get("groupId") for m in line.get((*BASELINE, "measures")) or []
             if isinstance(m, dict) for k in m.get("classes") or [] if isinstance(k, dict)
             for c in k.get("categories") or [] if isinstance(c, dict)
             for x in c.get("measurements") or [] if isinstance(x, dict)]
    check("baseline characteristics", baseline, refs)
    events = {g.get("id") for g in line.get((*AE, "eventGroups")) or [] if isinstance(g, dict)}
    for key in ("seriousEvents", "otherEvents"):
        refs = [st.get("groupId") for e in line.get((*AE, key)) or [] if isinstance(e, dict)
                for st in e.get("stats") or [] if isinstance(st, dict)]
        check(f"adverse events ({key})", events, refs)
    return problems


# --- knowledge-base passages and selection -------------------------------------------


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def study_meta(study: dict[str, Any]) -> dict[str, Any]:
    """Metadata a KB passage of the study carries."""
    line = Line(study)
    return {
        "nct_id": line.get((*IDENT, "nctId")),
        "phases": list(line.get((*DESIGN, "phases")) or []),
        "conditions": list(line.get((*P, "conditionsModule", "conditions")) or []),
        "interventions": [i.get("name") for i in line.get((*ARMS, "interventions")) or []],
        "overall_status": line.get((*STATUS, "overallStatus")),
        "has_results": bool(study.get("hasResults")),
    }


def summary_documents(summary: TrialSummary, study: dict[str, Any]) -> list[Document]:
    """One knowledge-base document per section: ``<NCT>#<section slug>``."""
    meta = study_meta(study)
    return [
        Document(
            doc_id=f"{summary.nct_id}#{slug(section.name)}",
            title=f"{summary.nct_id} {summary.title}: {section.name}",
            text="\n".join(s.text for s in section.sentences),
            url=STUDY_URL.format(summary.nct_id),
            source="clinicaltrials.gov",
            meta={**meta, "section": section.name},
        )
        for section in summary.sections
    ]


T = TypeVar("T")


def _data(item: Any) -> dict[str, Any]:
    data = getattr(item, "data", item)
    return data if isinstance(data, dict) else {}


def matches(study: dict[str, Any], condition: str | None = None,
            results_posted: bool | None = True) -> bool:
    """Whether a study passes the selection filters (see :func:`select_studies`)."""
    if results_posted is not None and bool(study.get("hasResults")) != results_posted:
        return False
    if condition:
        line = Line(study)
        cond = (*P, "conditionsModule")
        haystack = [*(line.get((*cond, "conditions")) or []),
                    *(line.get((*cond, "keywords")) or []),
                    line.get((*IDENT, "briefTitle")) or "",
                    line.get((*IDENT, "officialTitle")) or ""]
        needle = condition.lower()
        return any(needle in str(text).lower() for text in haystack)
    return True


def select_studies(studies: Iterable[T], *, condition: str | None = None,
                   results_posted: bool | None = True, n: int | None = None,
                   seed: int = 0) -> list[T]:
    """The studies passing the filters, or a seeded sample of ``n`` of them.

    ``condition``: case-insensitive substring of a condition, keyword or title.
    ``results_posted``: True keeps studies with posted results (as the paper did), False
    those without, None both. Items are study dicts or objects with a ``data`` dict
    (``trials.reader.Study``). Sampling is a reservoir sample (algorithm R with
    ``random.Random(seed)``): one streaming pass holding at most ``n`` items, the same
    sample for the same input order and seed; the sample keeps the input order.
    """
    rng = random.Random(seed)
    reservoir: list[tuple[int, T]] = []
    seen = 0
    for item in studies:
        if not matches(_data(item), condition, results_posted):
            continue
        if n is None or len(reservoir) < n:
            reservoir.append((seen, item))
        else:
            slot = rng.randrange(seen + 1)
            if slot < n:
                reservoir[slot] = (seen, item)
        seen += 1
    return [item for _, item in sorted(reservoir, key=lambda pair: pair[0])]


def iter_summary_documents(studies: Iterable[Any]) -> Iterator[Document]:
    """KB documents of each study (dicts or objects with a ``data`` dict), in order."""
    for item in studies:
        study = _data(item)
        yield from summary_documents(curate(study), study)
