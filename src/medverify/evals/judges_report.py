"""What ``eval judges`` writes for people: one Markdown table and one SVG.

The table has a row per judge and set: macro-F1 with its bootstrap 95 % interval, per-class
F1, the precision of every FACT verdict (interval) and of the confident ones with their
coverage, errors, and seconds and tokens per pair; then the cascade curves. The SVG draws
macro-F1 with its interval per set and judge (left) and, per set, macro-F1 against the
share of pairs the cascade sends to the model judge (right).
"""

from __future__ import annotations

from medverify.evals.judges import CascadeCurve, Interval, JudgeOnSet, JudgesEval
from medverify.report.svg import MUTED, PALETTE, Box, document, esc

COLUMNS = ("set", "judge", "n", "macro-F1 [95% CI]", "F1 S / C / N", "FACT precision [CI]",
           "confident FACT: precision / coverage", "errors", "decided by", "s/pair",
           "tokens/pair")


def _interval(value: Interval) -> str:
    if value.value is None:
        return "—"
    if value.low is None:
        return f"{value.value:.3f}"
    return f"{value.value:.3f} [{value.low:.2f}, {value.high:.2f}]"


def _num(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def row(result: JudgeOnSet) -> list[str]:
    """One table row."""
    s = result.scores
    per_class = " / ".join(_num(s.per_class.get(lab, {}).get("f1"), 2)
                           for lab in ("SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO"))
    confident = (f"{_num(result.confident_fact_precision)} / "
                 f"{_num(result.confident_fact_coverage)}")
    return [result.set, result.judge, str(s.n), _interval(result.macro_f1), per_class,
            _interval(result.fact_precision), confident,
            str(s.n_errors + s.n_judgment_errors),
            " / ".join(f"{kind} {n}" for kind, n in sorted(s.decided_by.items())),
            f"{result.seconds_per_pair:.2f}",
            f"{result.tokens_per_pair:.0f}"]


def markdown(report: JudgesEval) -> str:
    """The comparison as Markdown: the main table, then the cascade curves."""
    lines = [f"Seeded sample: {report.sample or 'all'} pairs per set (seed {report.seed}); "
             "errors and judgment errors count as wrong in macro-F1. Seconds and tokens are "
             "those of the calls made in this run: a cached call costs none (a cascade whose "
             "model calls were cached reports the built-in judge's cost only).", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row(r)) + " |" for r in report.results]
    if report.cascades:
        lines += ["", "Cascade (built-in first; the least sure pairs go to the model judge):",
                  "", "| set | second judge | macro-F1 at 0 / 10 / 20 / 30 / 50 / 100 % sent "
                  "| gain kept at <= 30 % |", "|---|---|---|---|"]
        lines += [_cascade_row(c) for c in report.cascades]
    return "\n".join(lines) + "\n"


def _cascade_row(curve: CascadeCurve) -> str:
    at = {p.share_sent: p.macro_f1 for p in curve.points}
    values = " / ".join(_num(at.get(s)) for s in (0.0, 0.1, 0.2, 0.3, 0.5, 1.0))
    return f"| {curve.set} | {curve.second} | {values} | {_num(curve.gain_kept_at_30, 2)} |"


def svg(report: JudgesEval, title: str = "Judges side by side") -> str:
    """Macro-F1 with intervals (left) and cascade curves (right)."""
    sets = list(dict.fromkeys(r.set for r in report.results))
    judges = list(dict.fromkeys(r.judge for r in report.results))
    left = Box(60, 44, max(220, 110 * len(sets)), 260)
    body = [left.frame(), *_y_ticks(left)]
    for s_index, name in enumerate(sets):
        x0 = left.left + left.width * (s_index + 0.5) / len(sets)
        body.append(f'<text x="{x0:.1f}" y="{left.bottom + 16}" font-size="11" fill="{MUTED}" '
                    f'text-anchor="middle">{esc(name)}</text>')
        for j_index, judge in enumerate(judges):
            found = next((r for r in report.results if r.set == name and r.judge == judge),
                         None)
            if found is None or found.macro_f1.value is None:
                continue
            x = x0 + (j_index - (len(judges) - 1) / 2) * 12
            body += _point(left, x, found.macro_f1, PALETTE[j_index % len(PALETTE)], judge)
    right = Box(left.left + left.width + 70, 44, 300, 260)
    body += [right.frame(), *_y_ticks(right)]
    for c_index, curve in enumerate(report.cascades):
        body.append(_curve_path(right, curve, PALETTE[(c_index + 2) % len(PALETTE)]))
    body.append(f'<text x="{right.left + right.width / 2}" y="{right.bottom + 16}" '
                f'font-size="11" fill="{MUTED}" text-anchor="middle">share sent to the model '
                "judge (0 to 100 %)</text>")
    legend = [*judges, *(f"cascade → {c.second} on {c.set}" for c in report.cascades)]
    colours = [*(PALETTE[i % len(PALETTE)] for i in range(len(judges))),
               *(PALETTE[(i + 2) % len(PALETTE)] for i in range(len(report.cascades)))]
    for i, (name, colour) in enumerate(zip(legend, colours, strict=True)):
        body.append(f'<text x="{left.left}" y="{left.bottom + 40 + 15 * i}" font-size="12" '
                    f'fill="{colour}">— {esc(name)}</text>')
    return document(right.left + right.width + 20, left.bottom + 50 + 15 * len(legend),
                    title, body)


def _y_ticks(box: Box) -> list[str]:
    return [f'<text x="{box.left - 6}" y="{box.y(v) + 4:.1f}" font-size="11" fill="{MUTED}" '
            f'text-anchor="end">{v:.2f}</text>' for v in (0.0, 0.25, 0.5, 0.75, 1.0)]


def _point(box: Box, x: float, value: Interval, colour: str, judge: str) -> list[str]:
    assert value.value is not None
    out = []
    if value.low is not None and value.high is not None:
        out.append(f'<path d="M{x:.1f} {box.y(value.low):.1f}V{box.y(value.high):.1f}" '
                   f'stroke="{colour}" stroke-width="2"/>')
    out.append(f'<circle cx="{x:.1f}" cy="{box.y(value.value):.1f}" r="4" fill="{colour}">'
               f"<title>{esc(judge)}: macro-F1 {value.value:.3f}</title></circle>")
    return out


def _curve_path(box: Box, curve: CascadeCurve, colour: str) -> str:
    points = [(p.share_sent, p.macro_f1) for p in curve.points if p.macro_f1 is not None]
    if not points:
        return ""
    path = "M" + "L".join(f"{box.x(s):.1f} {box.y(f):.1f}" for s, f in points)
    return (f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2">'
            f"<title>{esc(curve.set)}: cascade to {esc(curve.second)}</title></path>")
