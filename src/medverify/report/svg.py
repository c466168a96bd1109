"""Hand-written inline SVG: what every chart of medverify shares.

The benchmark charts (:mod:`medverify.bench.plots`) and the risk classifier's charts
(:mod:`medverify.risk.plots`) are self-contained ``<svg>`` elements, built as strings
with no plotting library. This module holds what they have in common: the colours (the
Okabe-Ito palette, safe for the common colour-vision deficiencies, and the ink, muted
and grid greys), escaping of every piece of text (names are user input), the accessible
document root (``role="img"``, an ``aria-label``, a ``<title>`` and a visible heading),
``<title>`` tooltips, truncation of long labels, and :class:`Box`, a plot area that maps
data values to pixels.

Only the standard library is used.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from html import escape

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
           "#000000")
BLUE, ORANGE = PALETTE[0], PALETTE[1]
INK = "#1b2330"  # headings, labels that carry data
MUTED = "#5b6575"  # ticks, axis labels, frames
GRID = "#dde2ea"  # grid lines
FONT_FAMILY = "system-ui, sans-serif"
SVG_NS = "http://www.w3.org/2000/svg"


def esc(text: object) -> str:
    """``text`` as SVG (XML) text or attribute value: ``& < > " '`` escaped."""
    return escape(str(text), quote=True)


def tooltip(text: object) -> str:
    """A ``<title>`` child element: the tooltip of the element that holds it."""
    return f"<title>{esc(text)}</title>"


def truncate(text: str, chars: int) -> str:
    """``text`` cut to ``chars`` characters (at least 4), an ellipsis marking the cut."""
    chars = max(chars, 4)
    return text if len(text) <= chars else text[: chars - 1] + "…"


def document(width: float, height: float, title: str, body: Iterable[str], *,
             title_x: float = 12) -> str:
    """An ``<svg class="chart">`` root of ``width`` x ``height`` pixels (rounded to whole
    pixels) around ``body``: ``title`` is its accessible name (``aria-label`` and
    ``<title>``) and its visible heading, drawn at (``title_x``, 22)."""
    name = esc(title)
    return (f'<svg xmlns="{SVG_NS}" class="chart" role="img" aria-label="{name}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" '
            f'font-family="{FONT_FAMILY}"><title>{name}</title>'
            f'<text x="{title_x}" y="22" font-size="14" font-weight="600" fill="{INK}">{name}'
            f"</text>{''.join(body)}</svg>")


@dataclass(frozen=True)
class Box:
    """A plot area: ``left``/``top``/``width``/``height`` in pixels, and the data ranges it
    shows (``y`` grows upwards: ``y_range[0]`` is the bottom edge)."""

    left: float
    top: float
    width: float
    height: float
    x_range: tuple[float, float] = (0.0, 1.0)
    y_range: tuple[float, float] = (0.0, 1.0)

    @property
    def bottom(self) -> float:
        return self.top + self.height

    def x(self, value: float) -> float:
        """The pixel column of ``value`` (a constant range maps everything to the left)."""
        low, high = self.x_range
        return self.left + self.width * (value - low) / ((high - low) or 1.0)

    def y(self, value: float) -> float:
        """The pixel row of ``value`` (a constant range maps everything to the bottom)."""
        low, high = self.y_range
        return self.top + self.height - self.height * (value - low) / ((high - low) or 1.0)

    def frame(self, stroke: str = MUTED) -> str:
        """The area's outline."""
        return (f'<rect x="{self.left}" y="{self.top}" width="{self.width}" '
                f'height="{self.height}" fill="none" stroke="{stroke}" stroke-width="1"/>')
