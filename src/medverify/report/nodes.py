"""JSON-like values (a URL analysis, notes, a config) prepared for an HTML template as
:class:`Node` trees: text, key/value pairs, a table or a list, robustly (no key is assumed)
and bounded (long texts are cut, long lists and deep nesting are summarised).

Shared by the audit, benchmark and fact-check pages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

MAX_NODE_ITEMS = 200
MAX_NODE_DEPTH = 8
MAX_TEXT_CHARS = 2000
MAX_RECORD_COLUMNS = 12


@dataclass(frozen=True)
class Node:
    """A JSON-like value prepared for the template: text, key/value pairs, a table or a
    list; ``more`` counts the items left out."""

    kind: Literal["text", "kv", "table", "list", "stack"]
    text: str = ""
    items: list[tuple[str, Node]] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    rows: list[list[Node]] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)
    more: int = 0


def scalar_text(value: Any) -> str:
    """A scalar as short text: thousands separators, 4 significant digits, yes/no."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 1000 else f"{value:.4g}"
    text = str(value)
    return text if len(text) <= MAX_TEXT_CHARS else text[: MAX_TEXT_CHARS - 1] + "…"


def is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _is_record(value: Any) -> bool:
    return isinstance(value, Mapping) and all(is_scalar(v) for v in value.values())


def _columns(records: Sequence[Mapping[str, Any]]) -> list[str]:
    columns: dict[str, None] = {}
    for record in records:
        columns.update(dict.fromkeys(str(k) for k in record))
    return list(columns)


def to_node(value: Any, depth: int = 0) -> Node:
    """Turn any JSON-like value into a :class:`Node`, robustly (no key is assumed)."""
    if is_scalar(value):
        return Node("text", scalar_text(value))
    if depth >= MAX_NODE_DEPTH:
        return Node("text", scalar_text(json.dumps(value, default=str)))
    if isinstance(value, Mapping):
        return _mapping_node(value, depth)
    if isinstance(value, list | tuple | set | frozenset):
        return _sequence_node(list(value), depth)
    return Node("text", scalar_text(str(value)))


def _mapping_node(value: Mapping[Any, Any], depth: int) -> Node:
    if not value:
        return Node("text", "(none)")
    entries = list(value.items())
    more = max(len(entries) - MAX_NODE_ITEMS, 0)
    entries = entries[:MAX_NODE_ITEMS]
    records = [v for _, v in entries]
    if len(entries) >= 2 and all(_is_record(v) and v for v in records):
        columns = _columns(records)
        if len(columns) <= MAX_RECORD_COLUMNS:
            rows = [[Node("text", scalar_text(str(k)))] + [to_node(v.get(c)) for c in columns]
                    for k, v in entries]
            return Node("table", headers=["", *columns], rows=rows, more=more)
    if _groups(records):
        return _grouped_node(entries, depth, more)
    if depth > 0 and _is_record(value) and len(entries) <= MAX_RECORD_COLUMNS:
        keys = [scalar_text(str(k)) for k, _ in entries]
        return Node("table", headers=keys, rows=[[to_node(v) for _, v in entries]])
    items = [(scalar_text(str(k)), to_node(v, depth + 1)) for k, v in entries]
    return Node("kv", items=items, more=more)


def _groups(values: list[Any]) -> bool:
    """Several groups described by (mostly) the same keys, some of them scalars."""
    if len(values) < 2 or not all(isinstance(v, Mapping) and v for v in values):
        return False
    shared = set.intersection(*(set(map(str, v)) for v in values))
    return 2 * len(shared) >= len(_columns(values)) and 0 < len(_scalar_keys(values)) <= (
        MAX_RECORD_COLUMNS)


def _scalar_keys(values: list[Mapping[Any, Any]]) -> list[str]:
    return [c for c in _columns(values)
            if all(is_scalar(v.get(c)) for v in values if c in map(str, v))]


def _grouped_node(entries: list[tuple[Any, Any]], depth: int, more: int) -> Node:
    """Groups compared in one table of their scalar fields, then each group's other fields."""
    values = [v for _, v in entries]
    keys = _scalar_keys(values)
    rows = [[Node("text", scalar_text(str(name)))] + [to_node(v.get(k)) for k in keys]
            for name, v in entries]
    children = [Node("table", headers=["", *keys], rows=rows, more=more)]
    rest = [(scalar_text(str(name)), {k: x for k, x in v.items() if str(k) not in keys})
            for name, v in entries]
    items = [(name, _mapping_node(r, depth + 1)) for name, r in rest if r]
    if items:
        children.append(Node("kv", items=items))
    return Node("stack", children=children)


def _sequence_node(values: list[Any], depth: int) -> Node:
    if not values:
        return Node("text", "(none)")
    more = max(len(values) - MAX_NODE_ITEMS, 0)
    values = values[:MAX_NODE_ITEMS]
    if all(is_scalar(v) for v in values):
        suffix = f" … ({more:,} more)" if more else ""
        return Node("text", ", ".join(scalar_text(v) for v in values) + suffix)
    if all(_is_record(v) for v in values):
        columns = _columns(values)
        if len(columns) <= MAX_RECORD_COLUMNS:
            rows = [[to_node(v.get(c)) for c in columns] for v in values]
            return Node("table", headers=columns, rows=rows, more=more)
    return Node("list", children=[to_node(v, depth + 1) for v in values], more=more)
