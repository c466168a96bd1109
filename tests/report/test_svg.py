from __future__ import annotations

import ast
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from medverify.report import svg
from medverify.report.svg import Box, document, esc, tooltip, truncate

NS = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert("x")</script> & \'q\''


def test_esc_escapes_markup_and_quotes() -> None:
    assert esc(HOSTILE) == ("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; "
                            "&#x27;q&#x27;")
    assert esc(0.5) == "0.5"


def test_tooltip_is_an_escaped_title() -> None:
    assert tooltip("a < b") == "<title>a &lt; b</title>"


@pytest.mark.parametrize(("text", "chars", "expected"), [
    ("short", 10, "short"),
    ("exactly10!", 10, "exactly10!"),
    ("eleven char", 10, "eleven ch…"),
    ("abcdefgh", 2, "abc…"),  # never fewer than 4 characters
])
def test_truncate(text: str, chars: int, expected: str) -> None:
    assert truncate(text, chars) == expected


def test_document_is_an_accessible_well_formed_svg() -> None:
    out = document(300.4, 120, HOSTILE, ['<rect x="1" y="2" width="3" height="4"/>'], title_x=56)
    root = ET.fromstring(out)
    assert root.tag == f"{NS}svg"
    assert root.get("role") == "img" and root.get("aria-label") == HOSTILE
    assert root.get("viewBox") == "0 0 300 120"
    assert (root.get("width"), root.get("height")) == ("300", "120")
    assert root.find(f"{NS}title").text == HOSTILE  # type: ignore[union-attr]
    heading = root.find(f"{NS}text")
    assert heading is not None and heading.text == HOSTILE and heading.get("x") == "56"
    assert root.find(f"{NS}rect") is not None
    assert "<script" not in out


def test_box_maps_data_to_pixels_with_y_upwards() -> None:
    box = Box(10, 20, 200, 100, x_range=(-1.0, 1.0), y_range=(0.0, 10.0))
    assert (box.x(-1.0), box.x(0.0), box.x(1.0)) == (10, 110, 210)
    assert (box.y(0.0), box.y(10.0), box.y(5.0)) == (120, 20, 70)
    assert box.bottom == 120
    flat = Box(0, 0, 50, 50, x_range=(3.0, 3.0), y_range=(3.0, 3.0))
    assert (flat.x(3.0), flat.y(3.0)) == (0, 50)  # a constant range does not divide by 0
    frame = ET.fromstring(box.frame())
    assert (frame.get("x"), frame.get("width"), frame.get("fill")) == ("10", "200", "none")


def test_svg_module_imports_only_the_standard_library() -> None:
    tree = ast.parse(Path(svg.__file__).read_text("utf-8"))
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names}
    modules |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    allowed = {"__future__", "collections.abc", "dataclasses", "html", "medverify.errors"}
    assert modules <= allowed


def test_both_chart_modules_draw_their_root_with_the_shared_document() -> None:
    from medverify.bench.plots import grouped_bars
    from medverify.risk.plots import confusion_svg
    from medverify.risk.records import ConfusionMatrix

    bench = grouped_bars(["g"], ["m"], {}, title="T")
    risk = confusion_svg(ConfusionMatrix(matrix=[[3, 1], [0, 2]]))
    for out, title, x in ((bench, "T", "56"), (risk, "Confusion matrix (test split)", "12")):
        assert out.startswith(document(0, 0, title, [])[:60])
        heading = ET.fromstring(out).find(f"{NS}text")
        assert heading is not None and heading.text == title and heading.get("x") == x
