"""What the review pages say about one item, in words (issue 43).

* :func:`decision_caption`: how the judge decided the item's category, written from the
  verdict itself (its analyses, the passages' own probabilities and the thresholds it
  used, the exact checks' vetoes, the ``not_sure`` reason), never from a fixed sentence
  that can contradict what the judge did.
* :func:`input_rows`: the arbitration inputs under names that say what each number is
  (``judge_probability`` is the judge's raw probability, not the verdict's calibrated
  confidence).
* :func:`queue_columns` and :func:`shorten`: which optional columns the queue shows and
  how a long reason is cut (the full text stays in the cell's title and on the item page).

Everything here is plain text: the templates escape it (claims, passages and the judge's
reasons are untrusted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from medverify.review import ReviewItem
from medverify.verdict_rules import passage_label

SUPPORT_RULE = ("support counts only from a passage that states the claim, or one the "
                "verifier labels supported that no exact check vetoed")
CONTRADICTION_RULE = ("contradiction counts only from a passage about the claim (one "
                      "holding at least a quarter of its key content)")
"""The built-in judge's rule (:func:`medverify.judge.decide.sides`), said once."""

DECIDING = {"FACT": "support", "HALLUCINATION": "contradiction", "COVERAGE_GAP": "support"}
OTHER_SIDE = {"FACT": "contradiction", "HALLUCINATION": "support",
              "COVERAGE_GAP": "contradiction"}
"""For each category one analysis decides (for COVERAGE_GAP: the support that failed), the
analysis whose reason the judge records as deciding it, and the other one."""

INPUT_NAMES: dict[str, tuple[str, str]] = {
    "category": ("category", "the judge's category"),
    "risk": ("risk", "the risk classifier's hallucination probability"),
    "judge_probability": ("judge probability",
                          "the judge's raw probability for its category (uncalibrated: "
                          "not the verdict's confidence)"),
    "confident": ("confident", "whether the verdict's calibrated confidence reached its "
                  "threshold with nothing making it doubtful"),
    "clinical": ("clinical", "what the claim states (dose, drug, group, number)"),
    "escalation_rule": ("escalation rule", "the rule that wanted to escalate it"),
    "judge_category": ("judge category", "the judge's category before review"),
    "review_item": ("review item", "the review item that settled it"),
}
"""Each arbitration input's shown name and what it is (a title on the page)."""


@dataclass(frozen=True)
class InputRow:
    """One arbitration input as shown: name, value in words, what it is."""

    name: str
    value: str
    meaning: str


def input_rows(inputs: Mapping[str, object]) -> list[InputRow]:
    """The arbitration inputs as the item page lists them (the ``not_sure`` reason is shown
    on its own, above)."""
    rows = []
    for key, value in inputs.items():
        if key == "not_sure":
            continue
        name, meaning = INPUT_NAMES.get(key, (key.replace("_", " "), key))
        rows.append(InputRow(name=name, value=_value(key, value), meaning=meaning))
    return rows


def _value(key: str, value: object) -> str:
    if value is None:
        return "–"
    if key == "confident" or isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return f"{float(value):.2f}"
    return str(value)


def decision_caption(item: ReviewItem, not_sure: str | None) -> list[str]:
    """How the judge decided, one sentence each: the analysis that decided the category,
    why the other side did not (its reason, or past-threshold passages that did not count),
    each veto, the ``not_sure`` reason, and the thresholds the judge actually used."""
    lines = [_decided(item)]
    lines += _other_side(item)
    lines += [f"An exact check vetoed the support of passage {f.passage_id or '?'}: "
              f"{f.reason}." for f in item.findings if f.veto]
    if not_sure:
        lines.append(f"Not sure: {not_sure}.")
    support, contradict = _thresholds(item)
    if support is not None and contradict is not None:
        lines.append(f"Thresholds this judge used, per passage: support ≥ {support:.2f}, "
                     f"contradiction ≥ {contradict:.2f}; {SUPPORT_RULE}; {CONTRADICTION_RULE};"
                     " a passage past both counts for the larger.")
    return [line for line in lines if line]


def _decided(item: ReviewItem) -> str:
    reason = item.judge_reason or ""
    if not reason and item.category in DECIDING:
        reason = item.analyses.get(DECIDING[item.category], "")
    where = f" (deciding passage {item.evidence_passage_id})" if item.evidence_passage_id else ""
    if not reason:
        return f"{item.category}{where}: the judge gave no reason."
    return f"{item.category}{where}: {reason}."


def _other_side(item: ReviewItem) -> list[str]:
    """Why the analysis that did not decide did not: the judge's own reason when stored;
    otherwise (an item queued before) the passages that passed its threshold anyway."""
    side = OTHER_SIDE.get(item.category)
    if side is None:
        return []
    if reason := item.analyses.get(side):
        return [f"Not {side}: {reason}."]
    support, contradict = _thresholds(item)
    if support is None or contradict is None:
        return []
    key, threshold = (("CONTRADICTED", contradict) if side == "contradiction"
                      else ("SUPPORTED", support))
    lines = []
    for pid, own in sorted(item.passage_probabilities.items()):
        p = own.get(key)
        if p is None or p < threshold:
            continue
        why = "the judge's reason was not recorded with this item"
        label = passage_label([own.get("SUPPORTED", 0.0), own.get("CONTRADICTED", 0.0)],
                              (support, contradict))
        if label is not None and label != (1 if key == "CONTRADICTED" else 0):
            why = "it passed both thresholds and counts for the larger"
        lines.append(f"Passage {pid} reached {side} {p:.2f} (threshold {threshold:.2f}) "
                     f"but did not count against the {item.category}: {why}.")
    return lines


def _thresholds(item: ReviewItem) -> tuple[float | None, float | None]:
    found = item.probabilities
    return found.get("threshold_support"), found.get("threshold_contradict")


# -- the queue ---------------------------------------------------------------------------

OPTIONAL_COLUMNS = ("risk", "topic")
"""Queue columns shown only when some item on the page has a value for them."""


def queue_columns(items: Sequence[ReviewItem]) -> dict[str, bool]:
    """Which optional columns the queue shows: those some item on the page fills."""
    return {"risk": any(i.risk is not None for i in items),
            "topic": any(i.topic for i in items)}


def shorten(text: str | None, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters at a word, with an ellipsis."""
    text = " ".join((text or "").split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0] or text[: limit - 1]
    return cut.rstrip(",;: ") + "…"
