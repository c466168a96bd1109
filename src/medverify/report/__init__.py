"""Reports: metrics, JSON, a self-contained HTML page and a terminal summary."""

from medverify.files import atomic_write_text
from medverify.report.html import render_html, write_html
from medverify.report.metrics import AggregateMetrics, aggregate, compute_metrics
from medverify.report.render_json import read_json, report_to_json, write_json
from medverify.report.terminal import print_summary

__all__ = [
    "AggregateMetrics",
    "aggregate",
    "atomic_write_text",
    "compute_metrics",
    "print_summary",
    "read_json",
    "render_html",
    "report_to_json",
    "write_html",
    "write_json",
]
