"""Presentation helpers shared by the HTML page and the terminal summary."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from medverify.records import Category, CheckFinding, ClaimResult, Passage, Usage
from medverify.report.metrics import claim_score


@dataclass(frozen=True)
class CategoryStyle:
    """How a category is shown: a word, a symbol and a colour (never colour alone)."""

    category: Category
    label: str
    symbol: str
    css: str
    rich: str
    description: str


CATEGORY_STYLES: dict[Category, CategoryStyle] = {
    style.category: style
    for style in (
        CategoryStyle(
            Category.FACT,
            "Fact",
            "✓",
            "fact",
            "bold green",
            "Supported by the evidence and not contradicted.",
        ),
        CategoryStyle(
            Category.HALLUCINATION,
            "Hallucination",
            "✗",
            "hallucination",
            "bold red",
            "Contradicted by the evidence and not supported.",
        ),
        CategoryStyle(
            Category.JUDGMENT_ERROR,
            "Judgment error",
            "±",
            "judgment",
            "bold yellow",
            "The evidence both supports and contradicts the claim.",
        ),
        CategoryStyle(
            Category.COVERAGE_GAP,
            "Coverage gap",
            "?",
            "gap",
            "bold blue",
            "The evidence neither supports nor contradicts the claim.",
        ),
        CategoryStyle(
            Category.ERROR,
            "Error",
            "!",
            "error",
            "bold magenta",
            "A stage failed for this claim; it is not scored.",
        ),
    )
}

# Which colour wins where highlighted claims overlap: the most alarming one.
SEVERITY: dict[Category, int] = {
    Category.HALLUCINATION: 4,
    Category.JUDGMENT_ERROR: 3,
    Category.COVERAGE_GAP: 2,
    Category.ERROR: 1,
    Category.FACT: 0,
}


def percent(value: float | None) -> str:
    """``0.8333`` -> ``'83.3%'``; None -> ``'n/a'``."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def support_word(value: bool | None) -> str:
    """Response-level support as a word: supported, not supported or unknown."""
    if value is None:
        return "unknown"
    return "supported" if value else "not supported"


def score_text(result: ClaimResult) -> str:
    """The claim's score as text; ``'not scored'`` for ERROR claims."""
    score = claim_score(result)
    return "not scored" if score is None else f"{score:g}"


def not_sure_reason(result: ClaimResult) -> str | None:
    """Why the verdict is shown as NOT SURE (its ``confident`` is False); None when it is
    confident or was not assessed."""
    if result.confident is not False:
        return None
    return result.not_sure or "no reason recorded"


def confidence_note(result: ClaimResult) -> str | None:
    """``confident, 93%`` for a confident verdict (``confident`` alone without a calibrated
    probability); None otherwise."""
    if result.confident is not True:
        return None
    if result.confidence is None:
        return "confident"
    return f"confident, {percent_int(result.confidence)}"


def verdict_text(result: ClaimResult) -> str:
    """The category as it must be read: ``FACT (not sure: why)``, ``FACT (confident, 93%)``
    or plain ``FACT`` when the verdict was not assessed."""
    reason = not_sure_reason(result)
    if reason is not None:
        return f"{result.category.value} (not sure: {reason})"
    note = confidence_note(result)
    return f"{result.category.value} ({note})" if note else result.category.value


def percent_int(value: float) -> str:
    """``0.934`` -> ``'93%'``."""
    return f"{100 * value:.0f}%"


def findings(result: ClaimResult) -> list[CheckFinding]:
    """What the exact checks found between the claim and its evidence."""
    return list(result.verdict.findings) if result.verdict is not None else []


def finding_effect(finding: CheckFinding) -> str:
    """What a finding did to the verdict, in words."""
    return "support not counted" if finding.veto else "not sure"


def other_warnings(result: ClaimResult) -> list[str]:
    """The claim's warnings less the lines that describe its findings (those are listed on
    their own, with :func:`findings`)."""
    listed = findings(result)
    return [w for w in result.warnings if not any(w.startswith(f"{f.reason} (") for f in listed)]


def evidence_not_counted(result: ClaimResult) -> bool:
    """Whether some of the judge's evidence was not counted (an unverified quote, or a
    support an exact check vetoed)."""
    return bool(other_warnings(result)) or any(f.veto for f in findings(result))


def category_count_text(category: Category, counts: Mapping[str, int],
                        confident: Mapping[str, int], not_sure: Mapping[str, int]) -> str:
    """``FACT 3 (1 confident, 2 not sure)``: a category's claims and, when verdicts were
    assessed, how many are confident and how many are shown as not sure."""
    key = category.value
    parts = [f"{n} {word}" for n, word in ((confident.get(key, 0), "confident"),
                                           (not_sure.get(key, 0), "not sure")) if n]
    text = f"{key} {counts.get(key, 0)}"
    return f"{text} ({', '.join(parts)})" if parts else text


def safe_url(url: str | None) -> str | None:
    """The URL when it is an absolute http(s) URL, else None (never render it as a link)."""
    if not url:
        return None
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return url.strip()


def deciding_passage(result: ClaimResult) -> Passage | None:
    """The passage that decided the claim's category, when the judge named one."""
    if result.evidence_passage_id is None:
        return None
    for passage in result.passages:
        if passage.id == result.evidence_passage_id:
            return passage
    return None


def total_usage(usage: Mapping[str, Usage]) -> Usage:
    total = Usage()
    for stage_usage in usage.values():
        total = total.add(stage_usage)
    return total


CAUSE_WIDTH = 300


def counted_lines(title: str, causes: Counter[str], width: int = CAUSE_WIDTH) -> list[str]:
    """A heading with the total, then each distinct cause once with its count, most
    frequent first: how every terminal summary names its errors. Empty without causes."""
    if not causes:
        return []
    lines = [f"{title} ({sum(causes.values()):,}):"]
    lines += [f"  {n:,} × {shorten(cause, width)}" if n > 1 else f"  {shorten(cause, width)}"
              for cause, n in causes.most_common()]
    return lines


def shorten(text: str, width: int) -> str:
    """Collapse whitespace and cut to ``width`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: max(width - 1, 0)].rstrip() + "…"
