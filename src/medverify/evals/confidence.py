"""How far confident verdicts can be trusted: precision and coverage per category, and
coverage-vs-precision curves, measured on labelled claim/evidence pairs.

A verdict is *confident* when its judge says so (``Verdict.confident``); the rest are shown
as "not sure". For each category this module counts the confident verdicts, their
precision against the gold label (FACT is right on SUPPORTED; HALLUCINATION on
CONTRADICTED, or NOT_SUPPORTED for 2-way sets; COVERAGE_GAP on NOT_ENOUGH_INFO /
NOT_SUPPORTED) with a Wilson 95 % interval, and their coverage: the share of the pairs
whose gold label the category stands for that were confidently given it ("FACT confirms
23 % of the truly supported claims"). ``eval pairs`` reports it per file; the curve traces
precision against coverage as the confidence threshold moves, so a user can see what a
stricter or looser threshold would buy (:func:`curve_svg`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field
from rich.table import Table

from medverify.judge.confidence.card import RIGHT
from medverify.records import Verdict
from medverify.report.svg import BLUE, INK, MUTED, PALETTE, Box, document, esc
from medverify.stats import wilson

CURVE_POINTS = 40


class CategoryConfidence(BaseModel):
    """Confident verdicts of one category on one set of pairs."""

    model_config = ConfigDict(extra="forbid")

    given: int  # verdicts of this category, confident or not
    confident: int  # ... of them confident
    correct: int  # confident and right
    precision: float | None  # correct / confident
    precision_ci: tuple[float, float] | None = None  # Wilson 95 %
    truly: int  # pairs whose gold label the category stands for
    coverage: float | None  # correct / truly: the share of those confidently confirmed
    precision_all: float | None = None  # precision of every verdict of the category


class CurvePoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threshold: float
    coverage: float
    precision: float
    n: int


class ConfidenceScores(BaseModel):
    """Per category, and the share of all pairs decided confidently."""

    model_config = ConfigDict(extra="forbid")

    assessed: int  # verdicts that carry a confident flag
    confident_share: float | None  # confident / assessed
    categories: dict[str, CategoryConfidence] = Field(default_factory=dict)
    curves: dict[str, list[CurvePoint]] = Field(default_factory=dict)


def score_confidence(gold: Sequence[str], verdicts: Sequence[Verdict | None]) -> ConfidenceScores:
    """Confident precision and coverage per category (see the module docstring)."""
    judged = [(g, v) for g, v in zip(gold, verdicts, strict=True)
              if v is not None and v.confident is not None]
    confident = sum(1 for _, v in judged if v.confident)
    out = ConfidenceScores(assessed=len(judged),
                           confident_share=round(confident / len(judged), 4) if judged else None)
    for category, right in RIGHT.items():
        mine = [(g, v) for g, v in judged if v.category is category]
        sure = [(g, v) for g, v in mine if v.confident]
        correct = sum(1 for g, _ in sure if g in right)
        truly = sum(1 for g in gold if g in right)
        out.categories[category.value] = CategoryConfidence(
            given=len(mine), confident=len(sure), correct=correct,
            precision=round(correct / len(sure), 4) if sure else None,
            precision_ci=wilson(correct, len(sure)), truly=truly,
            coverage=round(correct / truly, 4) if truly else None,
            precision_all=round(sum(1 for g, _ in mine if g in right) / len(mine), 4)
            if mine else None)
        out.curves[category.value] = curve(
            [(v.confidence, g in right) for g, v in mine if v.confidence is not None], truly)
    return out


def curve(points: Sequence[tuple[float, bool]], truly: int) -> list[CurvePoint]:
    """Precision and coverage of "confident when confidence >= t", for up to
    :data:`CURVE_POINTS` thresholds t (the distinct confidences, thinned evenly)."""
    if not points or not truly:
        return []
    ranked = sorted(points, key=lambda p: -p[0])
    cuts = [i for i in range(len(ranked)) if i + 1 == len(ranked)
            or ranked[i + 1][0] < ranked[i][0]]
    step = max(1, len(cuts) // CURVE_POINTS)
    chosen = sorted(set(cuts[::step]) | {cuts[-1]})
    out, hits, last = [], 0, 0
    for i in chosen:
        hits += sum(1 for _, ok in ranked[last:i + 1] if ok)
        last = i + 1
        out.append(CurvePoint(threshold=round(ranked[i][0], 4), coverage=round(hits / truly, 4),
                              precision=round(hits / (i + 1), 4), n=i + 1))
    return out


def curve_svg(curves: Sequence[tuple[str, list[CurvePoint]]], title: str,
              target: float | None = None) -> str:
    """Precision (y) against coverage (x) for each named curve, the target as a line."""
    box = Box(60, 44, 420, 280)
    body = [box.frame()]
    for value in (0.0, 0.25, 0.5, 0.75, 1.0):
        body.append(f'<text x="{box.left - 6}" y="{box.y(value) + 4:.1f}" font-size="11" '
                    f'fill="{MUTED}" text-anchor="end">{value:.2f}</text>')
        body.append(f'<text x="{box.x(value):.1f}" y="{box.bottom + 16}" font-size="11" '
                    f'fill="{MUTED}" text-anchor="middle">{value:.0%}</text>')
    if target is not None:
        body.append(f'<path d="M{box.left} {box.y(target):.1f}H{box.left + box.width}" '
                    f'stroke="{INK}" stroke-dasharray="4 4"><title>target precision '
                    f'{target:.2f}</title></path>')
    for i, (name, points) in enumerate(curves):
        colour = (BLUE, *PALETTE[1:])[i % len(PALETTE)]
        if points:
            path = "M" + "L".join(f"{box.x(p.coverage):.1f} {box.y(p.precision):.1f}"
                                  for p in points)
            body.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2">'
                        f"<title>{esc(name)}</title></path>")
        body.append(f'<text x="{box.left}" y="{box.bottom + 52 + 15 * i}" font-size="12" '
                    f'fill="{colour}">— {esc(name)}</text>')
    body.append(f'<text x="{box.left + box.width / 2}" y="{box.bottom + 30}" font-size="12" '
                f'fill="{INK}" text-anchor="middle">coverage (share of the truly-labelled pairs '
                "confirmed)</text>")
    return document(box.left + box.width + 24, box.bottom + 60 + 15 * len(curves), title, body)


def confidence_table(sets: Sequence[tuple[str, ConfidenceScores]]) -> Table:
    """What ``eval pairs`` prints under its main table: per set and category, the verdicts
    given, the confident ones, their precision [95 % CI], the precision of all of them and
    the coverage."""
    table = Table(title="Confident verdicts (the rest are shown as not sure)",
                  title_justify="left")
    for name in CONFIDENCE_COLUMNS:
        table.add_column(name)
    for name, scores in sets:
        for row in confidence_rows(name, scores):
            table.add_row(*row)
    return table


def confidence_rows(name: str, scores: ConfidenceScores) -> list[list[str]]:
    """The :func:`confidence_table` rows of one set."""
    rows = []
    for category, c in scores.categories.items():
        ci = f" [{c.precision_ci[0]:.2f}-{c.precision_ci[1]:.2f}]" if c.precision_ci else ""
        rows.append([name, category, str(c.given), str(c.confident),
                     "—" if c.precision is None else f"{c.precision:.3f}{ci}",
                     "—" if c.precision_all is None else f"{c.precision_all:.3f}",
                     "—" if c.coverage is None else f"{c.coverage:.3f}"])
    return rows


CONFIDENCE_COLUMNS = ("file", "category", "given", "confident", "precision [95% CI]",
                      "precision, all", "coverage")
