"""What the review UI's item page shows (:mod:`medverify.service.ui` renders it): the answer
split around the claim, each passage with the deciding quote marked (:class:`PassageView`),
the judge's numbers apart from its thresholds (:class:`JudgeNumbers`), how sure the verdict
is and why (:class:`ItemVerdict`), the label buttons, and the labels a reviewer may see
(the second review is blind). All text here is untrusted: the templates escape it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from medverify.arbitration import why
from medverify.records import CheckFinding
from medverify.report.view import finding_effect
from medverify.review import ReviewItem, ReviewLabel, ReviewStatus
from medverify.service.item_view import decision_caption, input_rows
from medverify.store.access import KeyInfo, Role

LABELS: list[tuple[str, ReviewLabel, str]] = [
    ("1", ReviewLabel.FACT, "the evidence supports the claim"),
    ("2", ReviewLabel.HALLUCINATION, "the claim is false"),
    ("3", ReviewLabel.JUDGMENT_ERROR, "the judge misread the evidence"),
    ("4", ReviewLabel.COVERAGE_GAP, "true or false, the knowledge base lacks it"),
    ("5", ReviewLabel.CANNOT_TELL, "cannot decide"),
]
"""The label buttons: shortcut key, label, what it means."""



@dataclass
class PassageView:
    """One passage as the item page shows it: its text split around the deciding quote
    (each part escaped on its own, the quote in a ``<mark>``) and this passage's own
    probabilities (None where the judge recorded none per passage)."""

    id: str
    title: str | None
    url: str | None
    parts: list[tuple[str, bool]]  # (text, is the deciding quote)
    deciding: bool
    quote_missing: bool  # the deciding passage, whose text does not hold the quote verbatim
    support: float | None = None  # this passage's P(SUPPORTED)
    contradict: float | None = None  # this passage's P(CONTRADICTED)
    neither: float | None = None  # this passage's P(NOT_ENOUGH_INFO)


def answer_parts(item: ReviewItem) -> tuple[str, str, str] | None:
    """The answer split around the claim's span (before, claim, after); None without a
    usable span."""
    span, text = item.claim.span, item.answer_text
    if span is None or not 0 <= span.start < span.end <= len(text):
        return None
    return text[:span.start], text[span.start:span.end], text[span.end:]


def quote_parts(text: str, quote: str | None) -> list[tuple[str, bool]] | None:
    """``text`` split around the first occurrence of ``quote`` (exact, else ignoring case);
    None when it does not occur."""
    if not quote:
        return None
    at = text.find(quote)
    if at < 0 and len(text.casefold()) == len(text):
        at = text.casefold().find(quote.casefold())
    if at < 0:
        return None
    end = at + len(quote)
    return [(p, q) for p, q in ((text[:at], False), (text[at:end], True), (text[end:], False))
            if p]


def passage_views(item: ReviewItem) -> list[PassageView]:
    views = []
    for passage in item.passages:
        deciding = passage.id == item.evidence_passage_id
        parts = quote_parts(passage.text, item.evidence_quote) if deciding else None
        own = item.passage_probabilities.get(passage.id, {})
        views.append(PassageView(
            id=passage.id, title=passage.title, url=passage.url,
            parts=parts or [(passage.text, False)], deciding=deciding,
            quote_missing=deciding and bool(item.evidence_quote) and parts is None,
            support=own.get("SUPPORTED"), contradict=own.get("CONTRADICTED"),
            neither=own.get("NOT_ENOUGH_INFO")))
    return views


@dataclass
class JudgeNumbers:
    """The item's ``probabilities`` as what they are: ``values`` the judge's numbers
    (with the built-in judge, each the highest any one passage reached: ``maxima``), the
    thresholds apart, for a caption (``support``/``contradict``, any other in ``other``)."""

    values: list[tuple[str, float]]
    support: float | None
    contradict: float | None
    other: list[tuple[str, float]]

    @property
    def maxima(self) -> bool:
        return self.support is not None or self.contradict is not None


OUTCOME_NAMES = {"SUPPORTED": "support", "CONTRADICTED": "contradiction",
                 "NOT_ENOUGH_INFO": "neither (not enough information)"}
"""How the page names the judge's probability keys."""


def judge_numbers(item: ReviewItem) -> JudgeNumbers:
    found = dict(item.probabilities or {})
    support, contradict = found.pop("threshold_support", None), found.pop(
        "threshold_contradict", None)
    other = sorted((k, v) for k, v in found.items() if k.startswith("threshold_"))
    return JudgeNumbers(values=sorted((k, v) for k, v in found.items()
                                      if not k.startswith("threshold_")),
                        support=support, contradict=contradict, other=other)


def item_context(item: ReviewItem, key: KeyInfo | None) -> dict[str, Any]:
    """What the item page's template is rendered with (``key``: the reviewer's)."""
    passages = passage_views(item)
    deciding = next((p for p in passages if p.deciding), None)
    verdict = item_verdict(item)
    inputs = item.arbitration.get("inputs") or {}
    return {"item": item, "answer": answer_parts(item), "verdict": verdict,
            "passages": passages, "deciding": deciding, "labels": LABELS,
            "numbers": judge_numbers(item), "names": OUTCOME_NAMES,
            "caption": decision_caption(item, verdict.reason if verdict.not_sure else None),
            "inputs": input_rows(inputs if isinstance(inputs, dict) else {}),
            "shown_labels": visible_labels(item, key) if key else list(item.labels),
            "mine": key is not None and any(x.reviewer == key.id for x in item.labels)}


@dataclass
class ItemVerdict:
    """How sure the judge's verdict on an item is: ``confident`` None when it was not
    assessed (or the item was queued before it was recorded), False when the category must
    be read as NOT SURE (``reason`` says why); the exact-check findings with their effect."""

    category: str
    confident: bool | None
    reason: str | None
    findings: list[tuple[CheckFinding, str]]
    why: str = ""  # why arbitration decided as it did (the queue's "Why" column)

    @property
    def not_sure(self) -> bool:
        return self.confident is False


def item_verdict(item: ReviewItem) -> ItemVerdict:
    """The item's verdict as the pages show it. Whether it is confident, and why not, come
    from the inputs its arbitration recorded; the findings from the item's ``findings``,
    once the review record carries them (it does not yet: the page then lists none)."""
    inputs = item.arbitration.get("inputs") or {}
    flag = inputs.get("confident") if isinstance(inputs, dict) else None
    confident = None if flag is None else bool(flag)
    reason = inputs.get("not_sure") if confident is False else None
    found = list(item.findings)
    return ItemVerdict(
        category=item.category, confident=confident,
        reason=str(reason) if reason else ("no reason recorded" if confident is False else None),
        findings=[(f, finding_effect(f)) for f in found],
        why=why(str(rule), inputs) if (rule := item.arbitration.get("rule")) else "")


def visible_labels(item: ReviewItem, key: KeyInfo) -> list[Any]:
    """The labels this reviewer may see, as in the JSON API: while the item waits for a
    second label only their own (the second review is blind), unless the key is an
    admin's; every label otherwise."""
    if key.role is Role.ADMIN or item.status is not ReviewStatus.NEEDS_SECOND:
        return list(item.labels)
    return [x for x in item.labels if x.reviewer == key.id]
