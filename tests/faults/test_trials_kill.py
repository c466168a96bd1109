"""Kill -9 during a clinical-trial study (``medverify trials study``), rerun, compare with a
clean run: answers, judgments and the summary's rates must be the same record for record,
none lost or duplicated (the fault suite's method: tests/faults/test_kill_resume.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from medverify.llm.base import ChatRequest, Message
from medverify.testing import FakeChatServer
from medverify.testing.faults import (
    VOLATILE,
    cli_env,
    compare_records,
    first_difference,
    kill_points,
    normalise,
    read_jsonl,
    run_cli,
    run_killed,
)
from medverify.testing.judge import keyword_rule, scripted_judge
from medverify.testing.trial_models import TrialAnswerer, make_record

pytestmark = pytest.mark.timeout(300)
SEED = 17


def _request(body: dict[str, Any]) -> ChatRequest:
    return ChatRequest(model=str(body.get("model", "")), messages=tuple(
        Message(role=m["role"], content=str(m["content"])) for m in body.get("messages", [])))


def test_trial_study_survives_kills(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for n, title in ((1, "Examplimab in Lung Cancer"), (2, "Sampletinib in Melanoma")):
        record = make_record(f"NCT9000000{n}", title)
        (data / f"NCT9000000{n}.json").write_text(json.dumps(record), "utf-8")
    answerer = TrialAnswerer("grounded")
    model = FakeChatServer(lambda body: answerer(_request(body)), delay_s=0.02).start()
    judge = FakeChatServer(scripted_judge(keyword_rule(supported="Placebo",
                                                       contradicted="invented")),
                           delay_s=0.02).start()
    servers = [model, judge]
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    config = tmp_path / "config.toml"
    config.write_text('[retrieval]\nmode = "lexical"\n[trials]\nbootstrap = 200\n', "utf-8")

    def args(root: Path) -> list[str]:
        return ["trials", "study", str(data), "--models",
                f"g=openai-compatible:grounded@{model.base_url}", "--out", str(root / "run"),
                "--contexts", "title,json,summary", "--levels", "paragraph,sentence",
                "--judge", "llm", "--judge-model", f"openai-compatible:judge@{judge.base_url}",
                "--config", str(config)]

    try:
        first = run_cli(args(clean), env=cli_env(clean / "home"), cwd=clean)
        assert first.returncode == 0, first.describe()
        n_calls = sum(len(s.calls) for s in servers)
        for server in servers:
            server.calls.clear()
        points = kill_points(SEED, 3, 0.1 * n_calls, 0.9 * n_calls)
        chain = run_killed(args(killed), env=cli_env(killed / "home"), cwd=killed,
                           points=points,
                           progress=lambda: float(sum(len(s.calls) for s in servers)))
        assert chain.kills == 3, [a.describe() for a in chain.attempts]
    finally:
        for server in servers:
            server.close()

    replace_c, replace_k = {str(clean): "<WS>"}, {str(killed): "<WS>"}
    for name, key in (("answers.jsonl", lambda r: (r["model"], r["nct_id"], r["question"],
                                                   r["context"])),
                      ("judgments.jsonl", lambda r: (r["answer_id"], r["granularity"]))):
        found = compare_records(read_jsonl(clean / "run" / name),
                                read_jsonl(killed / "run" / name), key,
                                replace_clean=replace_c, replace_resumed=replace_k)
        assert found.ok and found.compared > 0, f"{name}: {found}"
    want = json.loads((clean / "run" / "summary.json").read_text("utf-8"))
    got = json.loads((killed / "run" / "summary.json").read_text("utf-8"))
    assert want["rates"] == got["rates"] and want["answers"] == got["answers"]
    drop = VOLATILE | {"run_id", "warnings"}
    diff = first_difference(normalise(want, drop=drop, replace=replace_c),
                            normalise(got, drop=drop, replace=replace_k))
    assert diff is None, diff
