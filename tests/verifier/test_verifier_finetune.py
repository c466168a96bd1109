"""The v3 fine-tuning recipe (medverify.verifier.finetune) on a tiny made-up data set: it
trains every layer but the word embeddings, saves loadable weights, checkpoints and resumes,
and refuses to resume another recipe. Real MiniLM base (the packaged model), CPU, a few
steps. The two fine-tuning runs are ``slow`` (``make test-slow``, in .ci/run)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from medverify.errors import ConfigError
from medverify.verifier import finetune as ft
from medverify.verifier.model import load_model

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def _torch_threads() -> Any:
    """finetune() sets torch's (process-wide) thread count; one thread is far faster on a busy
    2-core machine (and under pytest-xdist), and the count is put back for later tests."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


CLAIMS = [
    ("Metformin lowers blood glucose in type 2 diabetes.",
     "Metformin lowers blood glucose in adults with type 2 diabetes.", "SUPPORTED"),
    ("Metformin raises blood glucose in type 2 diabetes.",
     "Metformin lowers blood glucose in adults with type 2 diabetes.", "CONTRADICTED"),
    ("Metformin causes hair loss.",
     "Metformin lowers blood glucose in adults with type 2 diabetes.", "NOT_ENOUGH_INFO"),
    ("Aspirin reduces the risk of a second heart attack.",
     "Low-dose aspirin reduces the risk of a second heart attack.", "SUPPORTED"),
    ("Aspirin increases the risk of a second heart attack.",
     "Low-dose aspirin reduces the risk of a second heart attack.", "CONTRADICTED"),
    ("Aspirin cures migraine in children.",
     "Low-dose aspirin reduces the risk of a second heart attack.", "NOT_ENOUGH_INFO"),
]


def _data(tmp: Path) -> tuple[Path, Path]:
    pairs = tmp / "pairs"
    pairs.mkdir()
    names = {"checkcovid_train": "check-covid", "citint_train": "citation-integrity",
             "scifact_train": "scifact"}
    for name, dataset in names.items():
        rows = [{"id": f"{name}-{g}_{n}", "dataset": dataset, "claim": f"{c[:-1]} (cohort {g}).",
                 "evidence": f"{e} Cohort {g} of {name}.", "label": label, "labels": "3-way",
                 "meta": {"doc_id": f"{name}-{g}"}}
                for g in range(8) for n, (c, e, label) in enumerate(CLAIMS)]
        (pairs / f"{name}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    corpus = tmp / "corpus.jsonl.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as handle:
        for n in range(24):
            c, e, label = CLAIMS[n % len(CLAIMS)]
            kind = {"SUPPORTED": ("supported", "extract"), "CONTRADICTED":
                    ("contradicted", "direction"), "NOT_ENOUGH_INFO": ("nei", "bm25_hard")}[label]
            handle.write(json.dumps({"id": f"c{n}", "claim": c, "evidence": e, "label": label,
                                     "generator": kind[0], "edit_type": kind[1],
                                     "source": "medquad", "doc_id": f"d{n}",
                                     "group": f"g{n % 5}"}) + "\n")
    return pairs, corpus


def _config(tmp: Path, **kwargs: Any) -> ft.FinetuneConfig:
    pairs, corpus = _data(tmp) if not (tmp / "pairs").exists() else (tmp / "pairs",
                                                                       tmp / "corpus.jsonl.gz")
    base: dict[str, Any] = dict(data_dir=pairs, out=tmp / "out", corpus=corpus, batch_size=8,
                                stage1_epochs=1, stage2_epochs=1, checkpoint_every=1,
                                swap_nei={}, device="cpu", threads=1, max_tokens=64,
                                eval_files=[pairs / "scifact_train.jsonl"])
    base.update(kwargs)
    return ft.FinetuneConfig(**base)


def test_corpus_reading_limits_and_leaves_out_edit_types(tmp_path: Path) -> None:
    _, corpus = _data(tmp_path)
    assert len(ft.read_corpus(corpus)) == 24
    assert len(ft.read_corpus(corpus, limit=5)) == 5
    kept = ft.read_corpus(corpus, exclude=["contradicted/direction", "nei"])
    assert {p.label for p in kept} == {"SUPPORTED"} and len(kept) == 8
    assert ft.read_corpus(corpus, seed=1) != ft.read_corpus(corpus, seed=2)


@pytest.mark.slow  # a real MiniLM fine-tune (~10 s): `make test-slow`, run by .ci/run
def test_finetune_trains_saves_and_a_rerun_returns_the_result(tmp_path: Path) -> None:
    quick = dict(real_limit=60, checkpoint_every=100)  # a few steps, two checkpoint writes
    config = _config(tmp_path, **quick)
    meta = ft.finetune(config)
    assert meta["name"] == "medverify-verifier-v3" and meta["counts"]["corpus_pairs"] == 24
    assert [h["stage"] for h in meta["history"]] == ["stage1", "stage2"]
    assert "macro_f1" in meta["dev"]["scifact_train"]
    model, saved = load_model(config.out)
    assert saved["thresholds"] == meta["thresholds"] and model.n_layers == 4
    assert ft.finetune(config)["weights_sha256"] == saved["weights_sha256"]  # not retrained
    with pytest.raises(ConfigError, match="another recipe"):
        ft.finetune(_config(tmp_path, **quick, lr=1e-4))


@pytest.mark.slow  # a real MiniLM fine-tune (~10 s): `make test-slow`, run by .ci/run
def test_an_interrupted_run_resumes_from_its_checkpoint(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path, stage2=False)
    real_save = ft.save_checkpoint
    saves = {"n": 0}

    def crash_after_two(*args: Any, **kwargs: Any) -> None:
        real_save(*args, **kwargs)
        saves["n"] += 1
        if saves["n"] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(ft, "save_checkpoint", crash_after_two)
    with pytest.raises(KeyboardInterrupt):
        ft.finetune(config)
    checkpoint = torch.load(config.out / ft.CHECKPOINT, weights_only=False)
    assert checkpoint["stage"] == "stage1" and checkpoint["step"] == 2
    monkeypatch.setattr(ft, "save_checkpoint", real_save)
    steps: list[int] = []
    real_forward = ft._forward
    monkeypatch.setattr(ft, "_forward", lambda *a, **k: steps.append(1) or real_forward(*a, **k))
    ft.finetune(config)
    trained = len(ft.batches([("a", "b", 0)] * 24, 8, 0, config.seed))
    assert sum(steps) >= trained - 2  # the 2 done steps are not trained again...
    assert torch.load(config.out / ft.CHECKPOINT, weights_only=False)["stage"] == "done"
