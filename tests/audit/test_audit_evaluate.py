from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from medverify.audit.evaluate import (
    agreement,
    balanced_accuracy,
    cohen_kappa,
    evaluate_audit,
    evaluate_audit_records,
    load_audits,
)
from medverify.audit.records import AnswerAudit
from medverify.cli import main
from medverify.errors import InputError
from test_audit_metrics import audit, claim, valid_source

S, N = "SUPPORTED", "NOT_SUPPORTED"
GROUPS = ("all", "claude", "gpt")


def labelled(aid: str, rows: list[tuple[str, bool | None]], **meta: str) -> AnswerAudit:
    """An answer whose claims have gold labels and predictions (None: judge failed)."""
    claims = [claim(f"c{i}", {"s1": predicted}, gold) for i, (gold, predicted) in enumerate(rows)]
    return audit(aid, [valid_source("s1")], claims, **meta)


def confusion_audits() -> list[AnswerAudit]:
    """TP 20, FN 5, FP 10, TN 15 (50 scored claims), plus 3 unscored and 4 unlabelled."""
    rows = [(S, True)] * 20 + [(S, False)] * 5 + [(N, True)] * 10 + [(N, False)] * 15
    gpt = labelled("a1", rows[:25] + [(S, None)] * 2, system="gpt")
    claude = labelled("a2", [*rows[25:], (N, None)], system="claude")
    unlabelled = audit("a3", [valid_source("s1")], [claim(f"u{i}", {"s1": True}) for i in range(4)])
    return [gpt, claude, unlabelled]


def codes(tp: int, fn: int, fp: int, tn: int) -> np.ndarray:
    return np.asarray([3] * tp + [2] * fn + [1] * fp + [0] * tn, dtype=float)


# --- the scores ----------------------------------------------------------------------


def test_scores_by_hand() -> None:
    data = codes(tp=20, fn=5, fp=10, tn=15)
    assert agreement(data) == pytest.approx(0.7)
    assert balanced_accuracy(data) == pytest.approx((20 / 25 + 15 / 25) / 2)
    # p_o = 0.7; p_e = (25 * 30 + 25 * 20) / 50**2 = 0.5; kappa = 0.2 / 0.5
    assert cohen_kappa(data) == pytest.approx(0.4)


def test_kappa_matches_sklearn() -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(3)
    gold = rng.integers(0, 2, 200)
    predicted = np.where(rng.random(200) < 0.8, gold, 1 - gold)
    data = (2 * gold + predicted).astype(float)
    assert cohen_kappa(data) == pytest.approx(metrics.cohen_kappa_score(gold, predicted))
    assert balanced_accuracy(data) == pytest.approx(
        metrics.balanced_accuracy_score(gold, predicted)
    )


def test_degenerate_scores() -> None:
    assert np.isnan(cohen_kappa(codes(tp=5, fn=0, fp=0, tn=0)))  # one class on both sides
    assert cohen_kappa(codes(tp=0, fn=5, fp=0, tn=0)) == 0.0  # gold all S, predicted all N
    assert balanced_accuracy(codes(tp=3, fn=1, fp=0, tn=0)) == 0.75  # only one gold class
    assert np.isnan(agreement(codes(0, 0, 0, 0)))


# --- evaluate_audit_records ----------------------------------------------------------


def test_evaluate_records_overall() -> None:
    result = evaluate_audit_records(confusion_audits(), n_boot=400, seed=2)
    assert (result.n_answers, result.n_claims, result.n_gold) == (3, 57, 53)
    overall = result.overall
    assert (overall.n, overall.n_unscored) == (50, 3)
    assert overall.confusion == {S: {S: 20, N: 5}, N: {S: 10, N: 15}}
    assert overall.gold_supported_rate == 0.5 and overall.predicted_supported_rate == 0.6
    assert overall.kappa.value == pytest.approx(0.4)
    assert overall.agreement.value == pytest.approx(0.7)
    assert overall.balanced_accuracy.value == pytest.approx(0.7)
    for estimate in (overall.kappa, overall.agreement, overall.balanced_accuracy):
        assert estimate.n == 50 and estimate.ci is not None
        assert estimate.ci[0] < estimate.value < estimate.ci[1]  # type: ignore[operator]
    assert result == evaluate_audit_records(confusion_audits(), n_boot=400, seed=2)
    assert result != evaluate_audit_records(confusion_audits(), n_boot=400, seed=3)


def test_evaluate_records_breakdown() -> None:
    result = evaluate_audit_records(confusion_audits(), n_boot=100)
    assert result.by == "system" and list(result.breakdown) == ["claude", "gpt"]
    gpt = result.breakdown["gpt"]
    assert (gpt.n, gpt.n_unscored) == (25, 2)
    assert gpt.confusion == {S: {S: 20, N: 5}, N: {S: 0, N: 0}}
    assert gpt.balanced_accuracy.value == 0.8  # one gold class: its recall
    assert gpt.kappa.value == 0.0
    assert result.breakdown["claude"].agreement.value == pytest.approx(0.6)
    # the unlabelled answer has no system and no gold: no "(missing)" group
    assert "(missing)" not in result.breakdown


def test_evaluate_records_other_field_and_absent_field() -> None:
    audits = confusion_audits()
    audits[0].answer.meta["topic"] = "cardiology"
    by_topic = evaluate_audit_records(audits, by="topic", n_boot=50)
    assert set(by_topic.breakdown) == {"cardiology", "(missing)"}
    absent = evaluate_audit_records(audits, by="nothing", n_boot=50)
    assert absent.breakdown == {} and absent.by is None
    assert "nothing" in absent.warnings[0]
    assert evaluate_audit_records(audits, by=None, n_boot=50).warnings == []


def test_all_unscored_gives_no_scores() -> None:
    result = evaluate_audit_records([labelled("a", [(S, None), (N, None)])], n_boot=50)
    assert result.n_gold == 2 and result.overall.n == 0 and result.overall.n_unscored == 2
    assert result.overall.kappa.value is None and result.overall.kappa.ci is None
    assert result.overall.gold_supported_rate is None


# --- reading a directory -------------------------------------------------------------


def write_dir(path: Path, audits: list[AnswerAudit], tail: str = "") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    lines = "".join(a.model_dump_json() + "\n" for a in audits)
    (path / "answers.jsonl").write_text(lines + tail, "utf-8")
    return path


def test_evaluate_audit_dir_skips_truncated_last_line(tmp_path: Path) -> None:
    audits = confusion_audits()
    out = write_dir(tmp_path / "run", audits, tail=audits[0].model_dump_json()[:80])
    result = evaluate_audit(out, n_boot=100)
    assert result.n_answers == 3 and result.overall.n == 50
    assert result.path == str(out / "answers.jsonl")
    assert any("line 4" in w and "skipped" in w for w in result.warnings)
    assert evaluate_audit(out / "answers.jsonl", n_boot=100).overall == result.overall


def test_load_audits_later_duplicate_wins(tmp_path: Path) -> None:
    first = labelled("a1", [(S, False)])
    second = labelled("a1", [(S, True)])
    path = write_dir(tmp_path, [first, second]) / "answers.jsonl"
    audits, warnings = load_audits(path)
    assert len(audits) == 1 and audits[0].claims[0].supported is True
    assert "repeats answer a1" in warnings[0]


def test_evaluate_audit_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"no answers\.jsonl"):
        evaluate_audit(tmp_path)
    write_dir(tmp_path / "nogold", [audit("a", [], [claim("c1")])])
    with pytest.raises(InputError, match="gold label"):
        evaluate_audit(tmp_path / "nogold")
    (tmp_path / "wrong").mkdir()
    (tmp_path / "wrong" / "answers.jsonl").write_text('{"id": "x"}\n', "utf-8")
    with pytest.raises(InputError, match="line 1 is not an audited answer"):
        evaluate_audit(tmp_path / "wrong")


# --- the command ---------------------------------------------------------------------


def test_eval_audit_cli_end_to_end(tmp_path: Path) -> None:
    out = write_dir(tmp_path / "run", confusion_audits())
    json_out = tmp_path / "eval" / "audit.json"
    result = CliRunner().invoke(main, ["eval", "audit", str(out), "--json", str(json_out)])
    assert result.exit_code == 0, result.output
    assert "bal. acc" in result.output and "kappa" in result.output
    table = result.output.split("all claims: gold")[0].splitlines()
    rows = [line.split() for line in table if line.split() and line.split()[0] in GROUPS]
    assert [row[0] for row in rows] == ["all", "claude", "gpt"]
    assert rows[0][:6] == ["all", "50", "3", "0.50/0.60", "0.700", "0.700"]
    assert rows[0][6] == "0.400"
    data = json.loads(json_out.read_text("utf-8"))
    assert data["overall"]["n"] == 50 and data["overall"]["n_unscored"] == 3
    assert data["overall"]["kappa"]["value"] == pytest.approx(0.4)
    assert data["n_boot"] == 2000 and set(data["breakdown"]) == {"claude", "gpt"}


def test_eval_audit_cli_by_and_config(tmp_path: Path) -> None:
    audits = confusion_audits()
    audits[1].answer.meta["topic"] = "renal"
    out = write_dir(tmp_path / "run", audits)
    config = tmp_path / "config.toml"
    config.write_text("[audit]\nbootstrap = 50\nseed = 5\n", "utf-8")
    json_out = tmp_path / "audit.json"
    args = ["eval", "audit", str(out), "--by", "topic", "--json", str(json_out)]
    result = CliRunner().invoke(main, [*args, "--config", str(config)])
    assert result.exit_code == 0, result.output
    data = json.loads(json_out.read_text("utf-8"))
    assert (data["n_boot"], data["seed"], data["by"]) == (50, 5, "topic")
    assert "topic" in result.output and "renal" in result.output


def test_eval_audit_cli_exit_2(tmp_path: Path) -> None:
    missing = CliRunner().invoke(main, ["eval", "audit", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "no answers.jsonl" in missing.output
    write_dir(tmp_path / "nogold", [audit("a", [], [claim("c1")])])
    nogold = CliRunner().invoke(main, ["eval", "audit", str(tmp_path / "nogold")])
    assert nogold.exit_code == 2 and "gold label" in nogold.output


def test_with_source_leaves_out_claims_without_a_judged_source() -> None:
    no_source = audit("a4", [], [claim(f"n{i}", {}, S) for i in range(6)], system="gpt")
    result = evaluate_audit_records([*confusion_audits(), no_source], n_boot=100)
    assert result.overall.n == 56 and result.overall.confusion[S][N] == 11
    assert result.with_source.n == 50 and result.with_source.confusion[S][N] == 5
    assert result.with_source.kappa.value == pytest.approx(0.4)
