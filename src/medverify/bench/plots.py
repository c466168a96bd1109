"""Dependency-free inline SVG charts for the benchmark report.

:func:`grouped_bars` draws the paper's Fig. 1b shape: one group per metric (or per
question source), one bar per model, 95 % CI error bars, a 0-100 % axis and a legend.
Colours come from the Okabe-Ito palette (safe for the common colour-vision deficiencies)
and every bar carries its value in text too (a ``<title>`` tooltip), so colour is never
the only cue. Every piece of text (model names are user input) is escaped. The SVG
primitives are :mod:`medverify.report.svg`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from medverify.audit.html import estimate_text
from medverify.audit.records import AuditMetrics, Estimate
from medverify.report.svg import (
    GRID,
    INK,
    MUTED,
    PALETTE,
    Box,
    document,
    esc,
    tooltip,
    truncate,
)

PLOT_HEIGHT = 220
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP = 56, 16, 40
LABEL_LINE = 15
LABEL_SPACE = 2 * LABEL_LINE + 20  # two lines of group label, then the legend
LEGEND_ROW = 20
CHAR_WIDTH = 6.6  # average width of a 12px sans-serif character, for layout only
TITLE_CHAR_WIDTH = 8.0
MIN_WIDTH = 640
MIN_BAR = 1.5  # a zero is drawn as a hairline, so that it is not mistaken for n/a
TICKS = (0, 20, 40, 60, 80, 100)


@dataclass(frozen=True)
class _Frame:
    """Chart geometry: bar width, gaps, the plot box."""

    n_groups: int
    n_series: int
    bar: float
    gap: float = 28.0

    @property
    def group_width(self) -> float:
        return self.n_series * self.bar + self.gap

    @property
    def plot_width(self) -> float:
        return max(self.n_groups * self.group_width, MIN_WIDTH - MARGIN_LEFT - MARGIN_RIGHT)

    @property
    def box(self) -> Box:
        """The plot area; shares 0..1 run up from its bottom edge."""
        return Box(MARGIN_LEFT, MARGIN_TOP, self.plot_width, PLOT_HEIGHT)

    @property
    def base(self) -> float:
        return MARGIN_TOP + PLOT_HEIGHT

    def y(self, share: float) -> float:
        return self.box.y(min(max(share, 0.0), 1.0))

    def group_x(self, group: int) -> float:
        spare = self.plot_width - self.n_groups * self.group_width
        return MARGIN_LEFT + spare / 2 + group * self.group_width + self.gap / 2

    def bar_x(self, group: int, series: int) -> float:
        return self.group_x(group) + series * self.bar


def _bar_width(n_groups: int, n_series: int) -> float:
    total = max(n_groups * n_series, 1)
    return max(8.0, min(40.0, 720.0 / total))


def _axis(frame: _Frame, y_label: str) -> list[str]:
    right = MARGIN_LEFT + frame.plot_width
    parts = []
    for tick in TICKS:
        y = frame.y(tick / 100)
        parts.append(f'<line x1="{MARGIN_LEFT}" x2="{right:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="{GRID}" stroke-width="1"/>')
        parts.append(f'<text x="{MARGIN_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" '
                     f'font-size="11" fill="{MUTED}">{tick}</text>')
    mid = MARGIN_TOP + PLOT_HEIGHT / 2
    parts.append(f'<text x="14" y="{mid:.1f}" text-anchor="middle" font-size="12" '
                 f'fill="{MUTED}" transform="rotate(-90 14 {mid:.1f})">{esc(y_label)}</text>')
    parts.append(f'<line x1="{MARGIN_LEFT}" x2="{right:.1f}" y1="{frame.base}" '
                 f'y2="{frame.base}" stroke="{MUTED}" stroke-width="1"/>')
    return parts


def _error_bar(x: float, ci: tuple[float, float], frame: _Frame) -> str:
    low, high = frame.y(ci[0]), frame.y(ci[1])
    cap = min(frame.bar / 3, 5.0)
    return (f'<path d="M{x:.1f} {low:.1f}V{high:.1f}M{x - cap:.1f} {low:.1f}H{x + cap:.1f}'
            f'M{x - cap:.1f} {high:.1f}H{x + cap:.1f}" stroke="{INK}" stroke-width="1.3" '
            f'fill="none"/>')


def _bar(frame: _Frame, where: tuple[int, int], names: tuple[str, str],
         estimate: Estimate | None) -> str:
    group, series = where
    x = frame.bar_x(group, series)
    tip = f"{names[1]} · {names[0]}: "
    if estimate is None or estimate.value is None:
        centre = x + frame.bar / 2
        return (f'<text x="{centre:.1f}" y="{frame.base - 4:.1f}" text-anchor="middle" '
                f'font-size="9" fill="{MUTED}">{tooltip(tip + "no value")}n/a</text>')
    top = min(frame.y(estimate.value), frame.base - MIN_BAR)
    colour = PALETTE[series % len(PALETTE)]
    tip += f"{estimate_text(estimate)} (n = {estimate.n:,})"
    parts = [f'<g>{tooltip(tip)}<rect x="{x + 1:.1f}" y="{top:.1f}" '
             f'width="{frame.bar - 2:.1f}" height="{frame.base - top:.1f}" fill="{colour}" '
             f'stroke="{INK}" stroke-width="0.5"/>']
    if estimate.ci is not None:
        parts.append(_error_bar(x + frame.bar / 2, estimate.ci, frame))
    return "".join(parts) + "</g>"


def wrap(text: str, chars: int, lines: int = 2) -> list[str]:
    """``text`` in at most ``lines`` lines of about ``chars`` characters (the last one cut
    with an ellipsis when the text is longer)."""
    out: list[str] = []
    words = text.split()
    while words and len(out) < lines:
        line = words.pop(0)
        while words and len(line) + 1 + len(words[0]) <= chars:
            line += " " + words.pop(0)
        out.append(line)
    if words:
        out[-1] = truncate(out[-1] + " " + " ".join(words), chars)
    return [truncate(line, chars) for line in out]


def _group_labels(frame: _Frame, groups: Sequence[str]) -> list[str]:
    chars = int(frame.group_width / CHAR_WIDTH)
    parts = []
    for i, name in enumerate(groups):
        x = frame.group_x(i) + frame.n_series * frame.bar / 2
        lines = "".join(f'<tspan x="{x:.1f}" dy="{0 if n == 0 else LABEL_LINE}">{esc(line)}'
                        "</tspan>" for n, line in enumerate(wrap(name, chars)))
        parts.append(f'<text x="{x:.1f}" y="{frame.base + 17:.1f}" text-anchor="middle" '
                     f'font-size="12" fill="{INK}">{tooltip(name)}{lines}</text>')
    return parts


def _legend(frame: _Frame, series: Sequence[str]) -> tuple[list[str], int]:
    """Legend items laid out in rows under the plot; returns the items and row count."""
    parts, x, row = [], float(MARGIN_LEFT), 0
    right = MARGIN_LEFT + frame.plot_width
    for i, name in enumerate(series):
        label = truncate(name, 40)
        width = 22 + CHAR_WIDTH * len(label) + 14
        if x + width > right and x > MARGIN_LEFT:
            x, row = float(MARGIN_LEFT), row + 1
        y = frame.base + LABEL_SPACE + row * LEGEND_ROW
        parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="12" height="12" '
                     f'fill="{PALETTE[i % len(PALETTE)]}" stroke="{INK}" stroke-width="0.5"/>'
                     f'<text x="{x + 17:.1f}" y="{y + 10:.1f}" font-size="12" fill="{INK}">'
                     f"{tooltip(name)}{esc(label)}</text>")
        x += width
    return parts, row + 1 if series else 0


def grouped_bars(
    groups: list[str],
    series: list[str],
    values: Mapping[tuple[str, str], Estimate],
    *,
    title: str,
    y_label: str = "%",
) -> str:
    """Grouped bars (one group per entry of ``groups``, one bar per entry of ``series``)
    of shares in [0, 1] drawn as 0-100 %, with 95 % CI error bars; ``values`` maps
    (group, series) to an estimate; a missing or undefined one is drawn as ``n/a``."""
    frame = _Frame(len(groups), len(series), _bar_width(len(groups), len(series)))
    legend, rows = _legend(frame, series)
    width = max(MARGIN_LEFT + frame.plot_width + MARGIN_RIGHT,
                MARGIN_LEFT + TITLE_CHAR_WIDTH * len(title) + MARGIN_RIGHT)
    height = frame.base + LABEL_SPACE + rows * LEGEND_ROW + 8
    bars = [_bar(frame, (g, s), (group, name), values.get((group, name)))
            for g, group in enumerate(groups) for s, name in enumerate(series)]
    body = _axis(frame, y_label) + bars + _group_labels(frame, groups) + legend
    return document(width, height, title, body, title_x=MARGIN_LEFT)


def metric_chart(
    overall: Mapping[str, AuditMetrics],
    models: Sequence[str],
    metrics: Sequence[tuple[str, str]],
    *,
    title: str,
) -> str:
    """Fig. 1b: one group per metric (``(key, label)``), one bar per model."""
    values = {(label, model): getattr(overall[model], key)
              for key, label in metrics for model in models if model in overall}
    return grouped_bars([label for _, label in metrics], list(models), values, title=title)


def source_chart(
    by_source: Mapping[str, Mapping[str, AuditMetrics]],
    models: Sequence[str],
    sources: Sequence[str],
    metric: str,
    *,
    title: str,
) -> str:
    """One group per question source, one bar per model, for one metric."""
    values = {(source, model): getattr(by_source[model][source], metric)
              for model in models for source in sources
              if source in by_source.get(model, {})}
    return grouped_bars(list(sources), list(models), values, title=title)
