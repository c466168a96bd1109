"""Presentation helpers shared by the HTML page and the terminal summary."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from medverify.records import Category, ClaimResult, Passage, Usage
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
