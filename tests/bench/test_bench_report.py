from __future__ import annotations

import csv
import re
from dataclasses import replace
from pathlib import Path

import pytest

from medverify.audit.html import estimate_text
from medverify.audit.records import AuditMetrics, Estimate
from medverify.bench import export
from medverify.bench.export import ROW_TYPES, TABLES, csv_cell, export_tables, table_rows
from medverify.bench.loading import RunRecords, load_run
from medverify.bench.plots import PALETTE, grouped_bars, source_chart, wrap
from medverify.bench.records import BenchManifest, BenchSummary, Comparison, ReplyStats
from medverify.bench.report import (
    diff_text,
    domain_ranks,
    examples,
    find_comparison,
    findings,
    p_text,
    render_bench_html,
    write_bench_html,
)
from medverify.bench.summary import summarize
from medverify.errors import MissingDependencyError
from test_bench_summary import GOOD, PRICES, fast_config, run_records, write_run

HOSTILE = '<script>alert("x")</script>'


@pytest.fixture(scope="module")
def hostile_run() -> tuple[RunRecords, BenchSummary]:
    records = run_records((GOOD, HOSTILE))
    return records, summarize(records, fast_config(prices=PRICES))


# --- plots ----------------------------------------------------------------------------------


def test_grouped_bars_escape_and_draw_intervals() -> None:
    values = {("Support", "a"): Estimate(value=0.5, ci=(0.4, 0.6), n=10),
              ("Support", HOSTILE): Estimate(value=0.25, ci=None, n=4)}
    svg = grouped_bars(["Support", "Validity"], ["a", HOSTILE], values, title="T <b>")
    assert "<script" not in svg and "<b>" not in svg
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in svg
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"')
    assert 'role="img"' in svg and 'aria-label="T &lt;b&gt;"' in svg
    assert "<title>T &lt;b&gt;</title>" in svg
    assert svg.count("<rect") == 2 + 2  # two bars and two legend swatches
    assert svg.count("<path") == 1  # only the bar with an interval has an error bar
    assert svg.count(">n/a<") == 2  # both bars of "Validity" have no value
    assert "a · Support: 50.0% [40.0–60.0] (n = 10)" in svg
    for tick in (0, 20, 40, 60, 80, 100):
        assert f">{tick}</text>" in svg


def test_bar_heights_follow_the_values() -> None:
    values = {("g", "a"): Estimate(value=1.0, n=1), ("g", "b"): Estimate(value=0.5, n=1)}
    svg = grouped_bars(["g"], ["a", "b"], values, title="t")
    heights = [float(h) for h in re.findall(r'<rect x="[^"]+" y="[^"]+" width="[^"]+" '
                                            r'height="([^"]+)"', svg)[:2]]
    assert heights[0] == pytest.approx(2 * heights[1])


def test_palette_cycles_and_labels_wrap() -> None:
    series = [f"model-{i}" for i in range(len(PALETTE) + 1)]
    values = {("g", s): Estimate(value=0.5, n=1) for s in series}
    svg = grouped_bars(["g"], series, values, title="t")
    assert svg.count(f'fill="{PALETTE[0]}"') == 4  # bar and swatch of models 0 and 8
    assert wrap("Statement-level support of answers", 16) == ["Statement-level",
                                                              "support of answ…"]
    assert wrap("short", 16) == ["short"]


def test_source_chart_has_one_group_per_source() -> None:
    by_source = {"m": {"s1": AuditMetrics(response_support=Estimate(value=0.3, n=3))}}
    svg = source_chart(by_source, ["m", "other"], ["s1", "s2"], "response_support",
                       title="per source")
    assert ">s1</tspan>" in svg and ">s2</tspan>" in svg
    assert svg.count(">n/a<") == 3


# --- the page -------------------------------------------------------------------------------


def test_page_escapes_model_labels_and_has_no_script(
    hostile_run: tuple[RunRecords, BenchSummary],
) -> None:
    records, summary = hostile_run
    html = render_bench_html(summary, records)
    assert "<script" not in html
    assert "&lt;script&gt;" in html
    assert "script-src" not in html and "default-src 'none'" in html
    assert html.count("<svg") == 2


def test_tables_show_the_summary_numbers(hostile_run: tuple[RunRecords, BenchSummary]) -> None:
    records, summary = hostile_run
    html = render_bench_html(summary, records)
    for metrics in summary.overall.values():
        for key in ("url_validity", "statement_support", "response_support", "unused_sources"):
            assert estimate_text(getattr(metrics, key)) in html
    for item in summary.comparisons:
        assert diff_text(item) in html
        assert p_text(item.p_holm) in html
    assert "$0.0016" in html  # 8 real calls x (100 x $1 + 50 x $2) per million
    assert "nih.gov" in html and "health-blog.com" in html
    replies = html[html.index('id="table-replies"'):]
    assert re.search(r"<td class=\"name\">alpha</td><td class=\"n\">8</td><td class=\"n\">8</td>",
                     replies)
    assert "HTTP 500 from provider" in html


def test_findings_are_computed_from_the_numbers(
    hostile_run: tuple[RunRecords, BenchSummary],
) -> None:
    records, summary = hostile_run
    lines = findings(summary, records)
    assert lines[0] == ("Across 8 questions from 2 sources (k-qa 4, medquad 4), 2 models gave "
                        "16 replies, of which 15 were audited.")
    best = estimate_text(summary.overall[GOOD].response_support)
    assert f"{GOOD} had the highest response-level support ({best})" in " ".join(lines)
    assert f"{HOSTILE} the lowest" in " ".join(lines)
    tests = [x for x in lines if x.startswith("Pairwise differences significant")]
    assert len(tests) == 1 and "paired permutation test" in tests[0]
    assert len(re.findall(r"[01] of 1 in ", tests[0])) == 4
    assert any(f"{HOSTILE}: 1 of 8 replies refused to answer and 1 failed with a provider "
               "error" in x for x in lines)


def test_findings_name_the_better_model_whatever_its_label() -> None:
    records = run_records(("zeta", "omega"))
    summary = summarize(records, fast_config())
    text = " ".join(findings(summary, records))
    assert "zeta had the highest response-level support" in text
    assert "omega the lowest" in text


def test_an_empty_run_still_renders() -> None:
    manifest = BenchManifest(run_id="empty", models=[], questions_sha256="0", n_questions=0)
    records = RunRecords(manifest)
    summary = summarize(records, fast_config())
    html = render_bench_html(summary, records)
    assert "Fewer than two models" in html and "No errors." in html


def test_written_page_links_the_audit_report(tmp_path: Path) -> None:
    layout = write_run(tmp_path / "run")
    records = load_run(layout, [])
    summary = summarize(records, fast_config())
    assert 'href="audit/report.html"' not in render_bench_html(summary, records)
    (layout.audit_dir / "report.html").write_text("<html></html>", "utf-8")
    path = write_bench_html(layout.report, summary, records)
    assert 'href="audit/report.html"' in path.read_text("utf-8")


def test_findings_state_the_headline_and_the_test_against_the_runner_up(
    hostile_run: tuple[RunRecords, BenchSummary],
) -> None:
    records, summary = hostile_run
    text = " ".join(findings(summary, records))
    good = summary.overall[GOOD].response_support.value
    bad = summary.overall[HOSTILE].response_support.value
    assert good is not None and bad is not None and good > bad
    assert (f"Between {100 * (1 - good):.1f}% ({GOOD}) and {100 * (1 - bad):.1f}% ({HOSTILE}) "
            "of a model's responses were not fully supported") in text
    item = find_comparison(summary.comparisons, "response_support", GOOD, HOSTILE)
    assert item is not None and item.p_holm is not None
    verdict = "significantly above" if item.p_holm < 0.05 else "not significantly different from"
    assert f"{GOOD} had the highest response-level support" in text
    assert f"{verdict} the next, {HOSTILE}" in text
    assert "Response-level support counts answers with at least one statement" in text


def test_runner_up_difference_is_oriented_best_minus_next() -> None:
    overall = {"a": AuditMetrics(response_support=Estimate(value=0.2, n=40)),
               "b": AuditMetrics(response_support=Estimate(value=0.9, n=40))}
    stored = Comparison(metric="response_support", model_a="a", model_b="b", n_questions=40,
                        value_a=0.2, value_b=0.9, difference=-0.7, ci=(-0.8, -0.6),
                        p_value=0.001, p_holm=0.002, test="t")
    summary = BenchSummary(run_id="r", overall=overall, comparisons=[stored])
    manifest = BenchManifest(run_id="r", models=[], questions_sha256="0", n_questions=0)
    text = " ".join(findings(summary, RunRecords(manifest)))
    assert ("b had the highest response-level support (90.0%); significantly above the "
            "next, a (20.0%; ") in text
    assert "difference +70.0 pp [+60.0 to +80.0], Holm p = 0.002" in text
    assert find_comparison([stored], "response_support", "b", "a") is stored
    assert find_comparison([stored], "url_validity", "a", "b") is None


def test_bad_replies_are_named_per_model_and_small_samples_flagged() -> None:
    replies = {"m": ReplyStats(n_questions=10, statuses={"ok": 6, "fallback": 2, "empty": 2},
                               retried=3, duplicate_urls=9, dropped_urls=1),
               "clean": ReplyStats(n_questions=10, statuses={"ok": 10})}
    overall = {"m": AuditMetrics(n_answers=10, url_validity=Estimate(value=0.5, n=4))}
    summary = BenchSummary(run_id="r", overall=overall, replies=replies)
    manifest = BenchManifest(run_id="r", models=[], questions_sha256="0", n_questions=0)
    text = " ".join(findings(summary, RunRecords(manifest)))
    assert ("m: 2 of 10 replies gave no usable JSON source list (URLs taken from the text), "
            "2 came back empty after the retry, 3 needed the one retry, 9 repeated URL entries "
            "were counted, then removed and 1 unusable URL entries were counted, then "
            "dropped") in text
    assert "clean:" not in text
    assert "fewer than 20 observations: m's source URL validity (n = 4 URLs)" in text


def test_domains_are_laid_out_like_table_1(
    hostile_run: tuple[RunRecords, BenchSummary],
) -> None:
    records, summary = hostile_run
    models = [m.label for m in summary.models]
    ranks = domain_ranks(summary, models)
    assert len(ranks) == max(len(summary.top_domains[m]) for m in models)
    assert all(len(row) == len(models) for row in ranks)
    assert ranks[0][0] == summary.top_domains[models[0]][0]
    html = render_bench_html(summary, records)
    table = html[html.index('id="table-domains"'):]
    table = table[:table.index("</table>")]
    assert "<th>Rank</th>" in table and "nih.gov" in table and "health-blog.com" in table


def test_examples_show_a_failure_per_model_with_verdicts(
    hostile_run: tuple[RunRecords, BenchSummary],
) -> None:
    records, summary = hostile_run
    found = {e.model: e for e in examples(records)}
    assert set(found) == {GOOD, HOSTILE}
    assert found[GOOD].fully_supported is True  # it has no failure: its first reply
    assert found[HOSTILE].fully_supported is False
    assert "not supported" in [c.verdict for c in found[HOSTILE].claims]
    assert found[GOOD].question_id == "q0" and found[GOOD].claims[0].supported_by
    html = render_bench_html(summary, records)
    assert 'id="examples-h"' in html and "not fully supported" in html
    assert html.count("Test: ") == 1  # the pairwise test is stated once, above the tables


# --- exports --------------------------------------------------------------------------------


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def test_csv_tables_round_trip(
    tmp_path: Path, hostile_run: tuple[RunRecords, BenchSummary]
) -> None:
    records, summary = hostile_run
    records = replace(records, audits=[a.model_copy(deep=True) for a in records.audits])
    records.audits[0].claims[0].claim.text = 'Has "quotes", commas,\nand a newline — ünïcode'
    written = export_tables(records, summary, tmp_path, parquet=False)
    assert [p.name for p in written] == [f"{name}.csv" for name in TABLES]
    rows = table_rows(records, summary)
    assert [len(rows[n]) for n in TABLES] == [16, 28, 44, 4 * 2 + 4 * 4, 4]
    for name in TABLES:
        read = _read_csv(tmp_path / f"{name}.csv")
        assert list(read[0]) == list(ROW_TYPES[name].model_fields)
        expected = [{k: csv_cell(v) for k, v in r.model_dump().items()} for r in rows[name]]
        assert read == expected
    claims = _read_csv(tmp_path / "claims.csv")
    assert claims[0]["claim"] == 'Has "quotes", commas,\nand a newline — ünïcode'


def test_export_rows_carry_the_audit_values(
    hostile_run: tuple[RunRecords, BenchSummary],
) -> None:
    records, summary = hostile_run
    rows = table_rows(records, summary)
    replies = {(r.model, r.question_id): r for r in rows["replies"]}  # type: ignore[attr-defined]
    error = replies[(HOSTILE, "q7")]
    assert error.status == "error" and not error.audited and error.n_claims is None
    good = replies[(GOOD, "q0")]
    assert good.retried and good.response_support is True and good.question_source == "medquad"
    verdicts = {r.verdict for r in rows["pairs"]}  # type: ignore[attr-defined]
    assert {"FACT", "HALLUCINATION", "ERROR"} <= verdicts
    metric = next(r for r in rows["metrics"]
                  if r.model == GOOD and r.question_source is None  # type: ignore[attr-defined]
                  and r.metric == "statement_support")  # type: ignore[attr-defined]
    assert metric.value == summary.overall[GOOD].statement_support.value  # type: ignore[attr-defined]


def test_parquet_tables_read_back(
    tmp_path: Path, hostile_run: tuple[RunRecords, BenchSummary]
) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    records, summary = hostile_run
    written = export_tables(records, summary, tmp_path, parquet=True)
    assert len(written) == 2 * len(TABLES)
    rows = table_rows(records, summary)
    for name in TABLES:
        table = pq.read_table(tmp_path / f"{name}.parquet")
        assert table.num_rows == len(rows[name])
        assert table.column_names == list(ROW_TYPES[name].model_fields)
    replies = pq.read_table(tmp_path / "replies.parquet").to_pylist()
    assert replies[0] == rows["replies"][0].model_dump()
    export_tables(records, summary, tmp_path, parquet=False)
    assert not list(tmp_path.glob("*.parquet"))  # no stale Parquet beside new CSV


def test_parquet_required_without_pyarrow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    hostile_run: tuple[RunRecords, BenchSummary],
) -> None:
    monkeypatch.setattr(export, "_arrow", lambda: None)
    records, summary = hostile_run
    with pytest.raises(MissingDependencyError, match="pip install pyarrow"):
        export_tables(records, summary, tmp_path, parquet=True)
    written = export_tables(records, summary, tmp_path)
    assert all(p.suffix == ".csv" for p in written)


def test_csv_cells_defuse_formulas_but_keep_numbers() -> None:
    from medverify.bench.export import csv_cell

    assert csv_cell('=HYPERLINK("http://evil","click")').startswith("'=")
    assert csv_cell("@SUM(A1)") == "'@SUM(A1)" and csv_cell("plain") == "plain"
    assert csv_cell(-0.25) == "-0.25" and csv_cell(None) == "" and csv_cell(True) == "true"
