"""The chart of an arbitration evaluation: the Pareto front of review load against errors
caught, as SVG (``medverify eval arbitration --svg``, ``benchmarks/bench_arbitration.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from medverify.evals.arbitration import ArbitrationEval, PolicyPoint, describe, pct
from medverify.report.svg import BLUE, GRID, INK, MUTED, ORANGE, PALETTE, Box, document, esc


def curve_svg(result: ArbitrationEval, title: str | None = None, *,
              name: str = "front", fronts: Sequence[tuple[str, Sequence[PolicyPoint]]] = (),
              marks: Sequence[tuple[str, PolicyPoint]] = ()) -> str:
    """The Pareto front (share escalated vs share of errors caught) as a step line, with the
    configured policy, the chosen one, the escalation budget and random escalation (the
    diagonal) marked; ``fronts`` (name, points) and ``marks`` (name, point) add other data
    sets' curves and points (e.g. the chosen policy on held-out data)."""
    box = Box(60, 44, 420, 300)
    body = [_ticks(box), box.frame(),
            f'<path d="M{box.x(0)} {box.y(0)}L{box.x(1)} {box.y(1)}" stroke="{MUTED}" '
            f'stroke-dasharray="2 4" fill="none"><title>escalating claims at random '
            f'(catches as many errors as it escalates claims)</title></path>']
    budget = box.x(min(result.max_escalation, 1.0))
    body.append(f'<path d="M{budget:.1f} {box.top}V{box.bottom}" stroke="{ORANGE}" '
                f'stroke-dasharray="5 4"><title>escalation budget '
                f'{pct(result.max_escalation)}</title></path>')
    curves = [(name, result.front, BLUE),
              *((label, points, PALETTE[3 + i % 4]) for i, (label, points) in enumerate(fronts))]
    legend: list[tuple[str, str]] = []
    for label, points, colour in curves:
        body += _front(box, label, points, colour)
        if fronts:
            legend.append((f"— {label}", colour))
    rings = [("configured", result.base, INK), ("chosen", result.chosen, PALETTE[2]),
             *((label, point, PALETTE[3 + i % 4]) for i, (label, point) in enumerate(marks))]
    for label, point, colour in rings:
        if point is None or point.caught is None:
            continue
        body.append(_dot(box, point, colour, 6, f"{label}: {describe(point)}", ring=True))
        legend.append((f"◯ {label}: escalates {pct(point.escalated)}, catches "
                       f"{pct(point.caught)}", colour))
    for row, (text, colour) in enumerate(legend):  # under the plot, clear of the curves
        body.append(_label(box.left, box.bottom + 58 + 15 * row, text, colour))
    body += [_label(box.left + box.width / 2, box.bottom + 34, "share of claims escalated",
                    INK, anchor="middle"),
             f'<text x="16" y="{box.top + box.height / 2:.1f}" font-size="12" fill="{INK}" '
             f'text-anchor="middle" transform="rotate(-90 16 {box.top + box.height / 2:.1f})">'
             "share of judge errors caught</text>"]
    heading = title or f"Arbitration: errors caught vs escalated (n={result.n})"
    return document(box.left + box.width + 24, box.bottom + 62 + 15 * len(legend), heading,
                    body)


def _front(box: Box, name: str, points: Sequence[PolicyPoint], colour: str) -> list[str]:
    """A front as a step line (more review load buys the next caught errors) with its
    points, each with its policy as the tooltip."""
    front = [p for p in points if p.caught is not None]
    if not front:
        return []
    path = f"M{box.x(front[0].escalated):.1f} {box.y(front[0].caught or 0):.1f}"
    for p in front[1:]:
        path += f"H{box.x(p.escalated):.1f}V{box.y(p.caught or 0):.1f}"
    parts = [f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2">'
             f"<title>{esc(name)}</title></path>"]
    parts += [_dot(box, p, colour, 3, f"{name}, {describe(p)}: escalates {pct(p.escalated)}, "
                                      f"catches {pct(p.caught)}, precision {pct(p.precision)}")
              for p in front]
    return parts


def _ticks(box: Box) -> str:
    parts = []
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x, y = box.x(tick), box.y(tick)
        parts.append(f'<path d="M{x:.1f} {box.top}V{box.bottom}M{box.left} {y:.1f}'
                     f'H{box.left + box.width}" stroke="{GRID}"/>')
        parts.append(_label(x, box.bottom + 14, f"{tick:.0%}", MUTED, anchor="middle"))
        parts.append(_label(box.left - 6, y + 4, f"{tick:.0%}", MUTED, anchor="end"))
    return "".join(parts)


def _dot(box: Box, point: PolicyPoint, colour: str, radius: float, tip: str, *,
         ring: bool = False) -> str:
    fill = 'fill="none" stroke-width="2"' if ring else f'fill="{colour}"'
    return (f'<circle cx="{box.x(point.escalated):.1f}" cy="{box.y(point.caught or 0):.1f}" '
            f'r="{radius}" {fill} stroke="{colour}"><title>{esc(tip)}</title></circle>')


def _label(x: float, y: float, text: str, colour: str, *, anchor: str = "start") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="11" fill="{colour}" '
            f'text-anchor="{anchor}">{esc(text)}</text>')
