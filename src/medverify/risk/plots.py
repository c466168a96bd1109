"""The risk classifier's charts as self-contained SVG: the ROC curve, the confusion
matrix, a PCA of the features and the base models' feature importances, all drawn from a
card's :class:`~medverify.risk.records.TrainingMetrics` (``medverify risk train`` saves
them beside the model, in ``plots/``)."""

from __future__ import annotations

from collections.abc import Sequence

from medverify.report.svg import (
    BLUE,
    GRID,
    INK,
    MUTED,
    ORANGE,
    Box,
    document,
    esc,
    tooltip,
    truncate,
)
from medverify.risk.classifier import CLASS_NAMES, LoadedRisk, TrainedRisk
from medverify.risk.records import (
    ClassifierCard,
    ConfusionMatrix,
    Importances,
    PcaSummary,
    RiskMetrics,
)

CLASS_COLOURS = (BLUE, ORANGE)
TOP_FEATURES = 20


def _text(x: float, y: float, text: object, *, size: int = 11, anchor: str = "start",
          fill: str = MUTED, extra: str = "", tip: str | None = None) -> str:
    """A ``<text>`` in this module's style (an optional ``tip`` as its tooltip)."""
    title = tooltip(tip) if tip is not None else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'fill="{fill}"{extra}>{title}{esc(text)}</text>')


def _unit_ticks(box: Box) -> list[str]:
    parts = []
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x, y = box.x(tick), box.y(tick)
        parts.append(f'<path d="M{x:.1f} {box.top}V{box.top + box.height}M{box.left} {y:.1f}'
                     f'H{box.left + box.width}" stroke="{GRID}" stroke-width="1"/>')
        parts.append(_text(x, box.top + box.height + 14, f"{tick:g}", anchor="middle"))
        parts.append(_text(box.left - 6, y + 4, f"{tick:g}", anchor="end"))
    return parts


def _axis_labels(box: Box, x_label: str, y_label: str) -> list[str]:
    mid = box.top + box.height / 2
    return [_text(box.left + box.width / 2, box.top + box.height + 32, x_label, size=12,
                  anchor="middle"),
            _text(14, mid, y_label, size=12, anchor="middle",
                  extra=f' transform="rotate(-90 14 {mid:.1f})"')]


def roc_svg(metrics: RiskMetrics) -> str:
    """The ROC curve of P(HALLUCINATION) on the test split, with the chance diagonal."""
    box = Box(56, 40, 300, 300)
    curve, auc = metrics.roc_curve, metrics.roc_auc.HALLUCINATION
    points = " ".join(f"{box.x(f):.1f},{box.y(t):.1f}"
                      for f, t in zip(curve.fpr, curve.tpr, strict=True))
    label = f"AUC = {auc:.3f}" if auc is not None else "AUC undefined (one class)"
    body = [*_unit_ticks(box), box.frame(),
            f'<path d="M{box.x(0)} {box.y(0)}L{box.x(1)} {box.y(1)}" stroke="{MUTED}" '
            f'stroke-dasharray="5 4" fill="none"><title>chance (AUC = 0.5)</title></path>',
            f'<polyline points="{points}" fill="none" stroke="{BLUE}" stroke-width="2">'
            f"{tooltip(label)}</polyline>",
            _text(box.x(0.97), box.y(0.05), label, size=12, anchor="end", fill=INK),
            *_axis_labels(box, "False positive rate", "True positive rate")]
    return document(380, 390, "ROC curve, hallucination class (test split)", body)


def confusion_svg(confusion: ConfusionMatrix) -> str:
    """The confusion matrix with counts and row shares; darker = larger row share."""
    matrix = confusion.matrix
    cell, left, top = 110, 150, 70
    body = [_text(left + cell, top - 12, "Predicted", size=12, anchor="middle", fill=INK)]
    for j, name in enumerate(CLASS_NAMES):
        body.append(_text(left + cell * j + cell / 2, top + 2 * cell + 18, name, anchor="middle"))
        body.append(_text(left - 8, top + cell * j + cell / 2 + 4, name, anchor="end"))
    for i, row in enumerate(matrix):
        total = sum(row) or 1
        for j, count in enumerate(row):
            body.append(_cell(left + cell * j, top + cell * i, cell, count, count / total,
                              f"true {CLASS_NAMES[i]}, predicted {CLASS_NAMES[j]}"))
    body.append(_text(16, top + cell, "True", size=12, anchor="middle", fill=INK,
                      extra=f' transform="rotate(-90 16 {top + cell})"'))
    return document(left + 2 * cell + 20, top + 2 * cell + 36, "Confusion matrix (test split)",
                    body)


def _cell(x: float, y: float, size: float, count: int, share: float, what: str) -> str:
    shade = 0.12 + 0.78 * share
    colour = "#ffffff" if share > 0.55 else INK
    return (f'<g>{tooltip(f"{what}: {count} ({share:.0%} of the row)")}'
            f'<rect x="{x}" y="{y}" width="{size}" height="{size}" fill="{BLUE}" '
            f'fill-opacity="{shade:.2f}" stroke="{INK}" stroke-width="0.5"/>'
            + _text(x + size / 2, y + size / 2, f"{count:,}", size=16, anchor="middle",
                    fill=colour)
            + _text(x + size / 2, y + size / 2 + 18, f"{share:.0%}", anchor="middle", fill=colour)
            + "</g>")


def pca_svg(pca: PcaSummary) -> str:
    """The PCA scatter: facts as blue circles, hallucinations as orange squares."""
    points = pca.points
    ratio = [*pca.explained_variance_ratio, 0.0, 0.0]
    xs = [p[0] for p in points] or [0.0]
    ys = [p[1] for p in points] or [0.0]
    box = Box(56, 40, 360, 300, _padded(xs), _padded(ys))
    body = [box.frame(), *_axis_labels(box, f"PC1 ({ratio[0]:.0%} of variance)",
                                       f"PC2 ({ratio[1]:.0%} of variance)")]
    for x, y, cls in points:
        body.append(_marker(box.x(x), box.y(y), int(cls)))
    body += _class_legend(box.left + box.width + 12, box.top + 10)
    return document(560, 390, "PCA of the standardized features", body)


def _padded(values: Sequence[float]) -> tuple[float, float]:
    low, high = min(values), max(values)
    pad = (high - low) * 0.05 or 1.0
    return low - pad, high + pad


def _marker(x: float, y: float, cls: int) -> str:
    colour = CLASS_COLOURS[cls]
    if cls:
        return (f'<rect x="{x - 2.5:.1f}" y="{y - 2.5:.1f}" width="5" height="5" '
                f'fill="{colour}" fill-opacity="0.7"/>')
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.6" fill="{colour}" fill-opacity="0.6"/>'


def _class_legend(x: float, y: float) -> list[str]:
    parts = []
    for cls, name in enumerate(CLASS_NAMES):
        parts.append(_marker(x + 4, y + 22 * cls, cls))
        parts.append(_text(x + 14, y + 22 * cls + 4, name, fill=INK))
    return parts


def importance_svg(importance: Importances, top: int = TOP_FEATURES) -> str:
    """The ``top`` features by mean normalised importance: one bar for the random forest
    (impurity) and one for XGBoost (gain), each as a share of its model's total."""
    forest, gain = importance.random_forest_share, importance.xgboost_gain_share
    ranked = sorted(forest, key=lambda n: -(forest.get(n, 0.0) + gain.get(n, 0.0)))[:top]
    peak = max([forest.get(n, 0.0) for n in ranked] + [gain.get(n, 0.0) for n in ranked]
               + [1e-12])
    left, row, bar, width = 230, 26, 10, 300
    body = []
    for i, name in enumerate(ranked):
        y = 44 + i * row
        body.append(_text(left - 8, y + 14, truncate(name, 32), anchor="end", fill=INK,
                          tip=name))
        for k, (series, values) in enumerate((("random forest", forest), ("XGBoost gain", gain))):
            value = values.get(name, 0.0)
            body.append(f'<rect x="{left}" y="{y + 2 + k * bar:.1f}" '
                        f'width="{max(width * value / peak, 0.8):.1f}" height="{bar - 1}" '
                        f'fill="{CLASS_COLOURS[k]}">{tooltip(f"{name} · {series}: {value:.1%}")}'
                        "</rect>")
    legend_y = 44 + len(ranked) * row + 10
    body += [f'<rect x="{left}" y="{legend_y}" width="12" height="10" fill="{BLUE}"/>',
             _text(left + 16, legend_y + 9, "random forest (impurity)", fill=INK),
             f'<rect x="{left + 170}" y="{legend_y}" width="12" height="10" fill="{ORANGE}"/>',
             _text(left + 186, legend_y + 9, "XGBoost (gain)", fill=INK)]
    title = f"Top {len(ranked)} features (share of each model's importance)"
    return document(left + width + 60, legend_y + 24, title, body)


def plots_svg(trained: TrainedRisk | LoadedRisk | ClassifierCard) -> dict[str, str]:
    """The card's charts as inline SVG: ``roc``, ``confusion``, ``pca``, ``importance``."""
    card = trained if isinstance(trained, ClassifierCard) else trained.card
    metrics = card.training_metrics()
    return {"roc": roc_svg(metrics), "confusion": confusion_svg(metrics.confusion_matrix),
            "pca": pca_svg(metrics.pca), "importance": importance_svg(metrics.importance)}
