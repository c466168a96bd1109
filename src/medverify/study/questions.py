"""The 15 clinician questions of CHECK's clinical-trial benchmark, the three contexts a
model under test is shown, and the evidence the judge is given for a trial.

The questions are the paper's (Supplementary Information S1.2), one per section of the
curated summary (:data:`medverify.trials.curate.SECTIONS`, in the same order). The
contexts are built from the registry record and its summary alone, so every run of a
study shows the models the same text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from medverify.kb.embed import Embedder
from medverify.prompts.untrusted import fence_id, fenced
from medverify.records import Passage
from medverify.retrieve import TextIndex
from medverify.study.records import Context, StudyTrial, TrialQuestion
from medverify.trials.curate import SECTIONS, TrialSummary, summary_documents

_QUESTIONS: tuple[tuple[str, str], ...] = (
    ("Definition", "Identify the title and purpose of the clinical trial."),
    ("Condition", "Describe the conditions studied."),
    ("Design Details",
     "Explain how the study was designed, including the number of participants enrolled."),
    ("Interventions", "Describe the interventions investigated in the clinical trial."),
    ("Study Arms", "Explain how the study arms were structured."),
    ("Eligibility Criteria", "Describe eligibility criteria for participation in the study."),
    ("Primary Outcome", "Describe the primary outcome measured."),
    ("Primary Outcome Statistical Analysis",
     "Describe the statistical methods used to analyze the primary outcome."),
    ("Primary Outcome Statistical Results",
     "Summarize the statistical results obtained for the primary outcome."),
    ("Secondary Outcomes Overview",
     "Provide a general summary of the secondary outcomes measured."),
    ("Statistical Approach",
     "Briefly describe the statistical methods used to analyze the secondary outcomes."),
    ("Key Results", "Highlight the most important statistical results and clinically "
     "relevant findings from the secondary outcomes."),
    ("Serious Adverse Events (SAEs)", "Summarize the most significant and clinically "
     "relevant serious adverse events reported."),
    ("Non-Serious Adverse Events", "Briefly list or group the most frequent non-serious "
     "adverse events highlighting those."),
    ("Key Observations and Clinical Relevance", "Provide a short overview of the overall "
     "safety profile based on the adverse events, focusing on any notable trends or "
     "conclusions about tolerability and risk."),
)

QUESTIONS: tuple[TrialQuestion, ...] = tuple(
    TrialQuestion(number=n, name=name, section=section, text=text)
    for n, ((name, text), section) in enumerate(zip(_QUESTIONS, SECTIONS, strict=True), 1)
)
"""The 15 questions, numbered 1-15 as in the paper."""

CONTEXT_NAMES = {
    Context.TITLE: "its title only",
    Context.JSON: "its ClinicalTrials.gov registry record, as JSON",
    Context.SUMMARY: "a structured summary of its registry record",
}
_FENCE_HEADERS = {Context.TITLE: "trial-title", Context.JSON: "trial-json",
                  Context.SUMMARY: "trial-summary"}


def questions_by_number(numbers: Sequence[int] | None = None) -> list[TrialQuestion]:
    """The questions with these numbers (all 15 by default), in order; ValueError for a
    number outside 1-15."""
    if numbers is None:
        return list(QUESTIONS)
    bad = sorted({n for n in numbers if not 1 <= n <= len(QUESTIONS)})
    if bad:
        raise ValueError(f"question numbers must be 1-{len(QUESTIONS)}; got {bad}")
    return [q for q in QUESTIONS if q.number in set(numbers)]


def record_sha256(record: dict[str, Any]) -> str:
    """The hash of a registry record's canonical JSON (sorted keys)."""
    canonical = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def summary_text(summary: TrialSummary) -> str:
    """The curated summary as the models under test see it: one heading per section."""
    parts = []
    for number, section in enumerate(summary.sections, 1):
        body = " ".join(s.text for s in section.sentences)
        parts.append(f"{number}. {section.name.capitalize()}: {body}")
    return "\n".join(parts)


def context_text(trial: StudyTrial, context: Context, json_chars: int) -> tuple[str, bool]:
    """The context shown for ``trial`` and whether it was cut to ``json_chars``."""
    if context is Context.TITLE:
        return trial.title, False
    if context is Context.SUMMARY:
        return summary_text(trial.summary), False
    raw = json.dumps(trial.record, ensure_ascii=False, indent=1)
    if len(raw) <= json_chars:
        return raw, False
    return raw[:json_chars] + f"\n[... record cut: {json_chars:,} of {len(raw):,} characters " \
        "shown]", True


def context_block(trial: StudyTrial, context: Context, json_chars: int) -> tuple[str, bool]:
    """The fenced context block of the answer prompt, and whether it was cut."""
    text, cut = context_text(trial, context, json_chars)
    return fenced(fence_id([text]), _FENCE_HEADERS[context], text), cut


# -- the judge's evidence --------------------------------------------------------------


class TrialEvidence:
    """A trial's curated summary as judge evidence: one passage per section, ranked per
    unit (BM25 over the 15 sections, fused with dense similarity when an embedder is
    given) with the question's own section always included."""

    def __init__(self, trial: StudyTrial, embedder: Embedder | None = None) -> None:
        docs = summary_documents(trial.summary, trial.record)
        self.passages = [
            Passage(id=d.doc_id, doc_id=d.doc_id, text=d.text, title=d.title, url=d.url,
                    source=d.source)
            for d in docs
        ]
        self.sections = [str(d.meta["section"]) for d in docs]
        self.embedder = embedder
        vectors = embedder.embed([p.text for p in self.passages]) if embedder else None
        self.index = TextIndex([f"{p.title}\n{p.text}" for p in self.passages], vectors)

    def section_of(self, passage_id: str | None) -> str | None:
        for passage, section in zip(self.passages, self.sections, strict=True):
            if passage.id == passage_id:
                return section
        return None

    def for_units(self, texts: Sequence[str], question: TrialQuestion,
                  k: int) -> list[list[Passage]]:
        """The evidence for each unit: the question's section, then the best-ranked others,
        ``k`` passages in all (fewer when the summary has fewer sections)."""
        own = SECTIONS.index(question.section) if question.section in SECTIONS else None
        vectors = self.embedder.embed(list(texts)) if self.embedder and texts else None
        out = []
        for n, text in enumerate(texts):
            vector = vectors[n] if vectors is not None else None
            ranked = self.index.rank(text, len(self.passages), vector=vector)
            order = [i for i, _ in ranked]
            chosen = ([own] if own is not None else []) + [i for i in order if i != own]
            out.append([self.passages[i] for i in chosen[:k]])
        return out

