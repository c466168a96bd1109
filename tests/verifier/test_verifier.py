"""Tests of the built-in verifier: metrics, windows, data assembly, model round trip, training."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from medverify.errors import ConfigError, InputError
from medverify.verifier import LABELS, Verifier, label_pairs, save_verifier
from medverify.verifier import data as vdata
from medverify.verifier.infer import DEFAULT_WEIGHTS, aggregate, thresholds_for
from medverify.verifier.metrics import classification_metrics, fold_binary, supported_vs_rest
from medverify.verifier.model import METADATA_FILE, WEIGHTS_FILE, build_model, load_tokenizer
from medverify.verifier.windows import best_window, make_windows, sentence_spans

S, C, N = LABELS


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def test_metrics_known_values() -> None:
    gold = [S, S, C, N]
    pred = [S, C, C, S]
    m = classification_metrics(gold, pred, LABELS)
    assert m["accuracy"] == pytest.approx(0.5)
    assert m["confusion"] == [[1, 1, 0], [0, 1, 0], [1, 0, 0]]
    f1_s, f1_c = 0.5, 2 / 3
    assert m["macro_f1"] == pytest.approx((f1_s + f1_c + 0.0) / 3)
    assert m["balanced_accuracy"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)


def test_metrics_ignore_absent_gold_labels() -> None:
    m = classification_metrics([S, C], [S, N], LABELS)
    assert m["macro_f1"] == pytest.approx(0.5)  # NEI has no gold support: not averaged


def test_fold_binary_and_supported_vs_rest() -> None:
    assert fold_binary([S, C, N, "NOT_SUPPORTED"]) == [
        S,
        "NOT_SUPPORTED",
        "NOT_SUPPORTED",
        "NOT_SUPPORTED",
    ]
    m = supported_vs_rest([S, C, N, S], [S, N, S, C])
    assert m["balanced_accuracy"] == pytest.approx((0.5 + 0.5) / 2)


def test_decide_uses_thresholds() -> None:
    probs = np.array([[0.6, 0.3, 0.1], [0.3, 0.45, 0.25], [0.34, 0.33, 0.33]])
    assert label_pairs(probs, {"support": 0.5, "contradict": 0.4}) == [S, C, N]
    assert label_pairs(probs, {"support": 0.3, "contradict": 0.5}) == [S, S, S]  # only P(S) holds
    assert label_pairs(probs, {"support": 0.3, "contradict": 0.4}) == [S, C, S]  # both: the larger
    assert label_pairs(probs, {"support": 0.7, "contradict": 0.7}) == [N, N, N]


def test_aggregate_takes_the_deciding_window() -> None:
    windows = np.array([[0.1, 0.1, 0.8], [0.2, 0.7, 0.1], [0.6, 0.1, 0.3]])
    assert aggregate(windows).tolist() == pytest.approx([0.2, 0.7, 0.1])


def test_windows_fit_and_cover_the_evidence(tokenizer) -> None:
    claim = "Vitamin D lowers the risk of respiratory infection."
    evidence = " ".join(
        f"Sentence number {i} talks about vitamin D and trial {i}." for i in range(80)
    )
    windows = make_windows(tokenizer, claim, evidence, max_tokens=64)
    assert len(windows) > 5
    for window in windows:
        assert len(tokenizer(claim, window)["input_ids"]) <= 64
    assert all(f"trial {i}." in " ".join(windows) for i in range(80))


def test_windows_cut_an_overlong_sentence(tokenizer) -> None:
    evidence = "word " * 300
    windows = make_windows(tokenizer, "a claim", evidence, max_tokens=64)
    assert len(windows) >= 5
    assert all(len(tokenizer("a claim", w)["input_ids"]) <= 64 for w in windows)


def test_short_evidence_is_one_window(tokenizer) -> None:
    assert make_windows(tokenizer, "claim", "Short evidence. Two sentences.") == [
        "Short evidence. Two sentences."
    ]
    assert sentence_spans("A b. C d!\nE") == [(0, 4), (5, 9), (10, 11)]


def test_best_window_prefers_overlap() -> None:
    windows = ["Cats sleep a lot.", "Aspirin reduces fever in adults.", "Dogs bark."]
    assert best_window("Does aspirin reduce fever?", windows) == windows[1]
    assert best_window("x", windows, anchor="Dogs bark loudly") == windows[2]


def test_perturb_makes_contradictions() -> None:
    rng = random.Random(0)
    assert vdata.perturb("The drug is safe for adults.", rng) != "The drug is safe for adults."
    assert vdata.perturb("It does not cause fever.", random.Random(1)) in {
        "It does cause fever.",
    }
    assert vdata.perturb("Hello there friend.", rng) is None


def _rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = LABELS[i % 3]
        topic = rng.choice(["aspirin", "vitamin", "statin", "insulin"])
        rows.append(
            {
                "id": f"checkcovid-g{i // 2}_{i % 2}",
                "dataset": "check-covid",
                "claim": f"{topic} helps patients {i}.",
                "labels": "3-way",
                "label": label,
                "evidence": f"In a trial {topic} was studied. Patients {i} improved. " * 3,
                "meta": {"doc_id": f"d{i // 2}", "rationale": [f"Patients {i} improved."]},
            }
        )
    return rows


def test_split_keeps_groups_together() -> None:
    pairs = [vdata._to_pair(r) for r in _rows(60, 0)]
    train, val = vdata.split_holdout(pairs, 0.2, 13)
    assert not {p.group for p in train} & {p.group for p in val}
    assert 8 <= len(val) <= 20


def test_load_pairs_refuses_eval_files(tmp_path: Path) -> None:
    path = tmp_path / "healthver_dev.jsonl"
    path.write_text("")
    with pytest.raises(InputError):
        vdata.load_pairs(path)


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("verifier")
    model = build_model(n_layers=1)
    save_verifier(
        model, out, metadata={"max_tokens": 64, "thresholds": {"support": 0.4, "contradict": 0.4}}
    )
    return out


@pytest.mark.parametrize("quantize", [True, False])
def test_round_trip_predicts_probabilities(tiny_weights: Path, quantize: bool) -> None:
    verifier = Verifier.load(tiny_weights, quantize=quantize)
    assert verifier.max_tokens == 64 and verifier.thresholds["support"] == 0.4
    long_evidence = "Aspirin lowers fever in adults. " * 40
    probs = verifier.predict([("Aspirin lowers fever.", long_evidence), ("x", "y")], batch_size=4)
    assert probs.shape == (2, 3) and probs.dtype == np.float32
    assert np.allclose(probs.sum(1), 1.0, atol=1e-4)
    windows = verifier.predict_windows("Aspirin lowers fever.", long_evidence)
    assert len(windows) > 1
    decisive = max(windows, key=lambda w: max(w[1][0], w[1][1]))[1]
    # float32 must reproduce the deciding window; int8 dynamic quantization computes its
    # activation scales per batch, so the same pair moves by a few hundredths with its batch.
    tolerance = 0.03 if quantize else 1e-4
    assert probs[0] == pytest.approx(decisive, abs=tolerance)


def test_shipped_mode_scores_a_pair_alike_alone_and_in_a_batch(
    tiny_weights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch-independent modes (ONNX Runtime's int8 one window a run, the default where
    it is installed, else int8 with per-window activation scales in batches, and the opt-in
    bfloat16 on AMX, issue 45; one window at a time, issue 27)
    give a pair the same probabilities alone and among others, and leave torch's threads
    as they were."""
    import torch

    from medverify.bf16 import amx_available
    from medverify.verifier import infer, onnx_int8
    from medverify.verifier.infer import PER_WINDOW_THREADS

    monkeypatch.setattr(infer, "SHORT_WINDOW_CHARS", 120)  # the tiny model's windows: both
    monkeypatch.delenv(infer.SCORING_ENV, raising=False)

    verifier = Verifier.load(tiny_weights)
    onnx = onnx_int8.onnx_available()  # auto: ONNX Runtime's int8 where it is installed
    assert verifier.scoring == ("onnx_int8" if onnx else "window_scales")
    assert verifier.threads == PER_WINDOW_THREADS
    assert verifier.scores_id == verifier.id + ("+onnx-int8" if onnx else "")
    if amx_available():  # the opt-in bfloat16 mode: its encoder, built only when asked for
        verifier.bf16 = Verifier.load(tiny_weights, scoring="bf16").bf16
    pair = ("Aspirin lowers fever in adults.", "In adults, aspirin lowered fever within hours.")
    others = [(f"Drug {i} raises blood pressure.", "Drug 1 lowered blood pressure. " * i)
              for i in range(1, 12)]
    threads = torch.get_num_threads()
    for scoring in (*(("bf16",) if amx_available() else ()), *(("onnx_int8",) if onnx else ()),
                    "window_scales", "per_window"):
        verifier.scoring = scoring
        alone = verifier.predict([pair])[0]
        batched = verifier.predict([*others[:5], pair, *others[5:]], batch_size=4)
        assert torch.get_num_threads() == threads
        assert np.abs(batched[5] - alone).max() <= 1e-6
    verifier.scoring = "batched"  # batched dynamic int8: the pair moves with its companions
    assert np.abs(verifier.predict([*others[:5], pair, *others[5:]], batch_size=12)[5]
                  - alone).max() > 1e-6


def test_small_weights_and_base_check(tiny_weights: Path, tmp_path: Path) -> None:
    assert (tiny_weights / WEIGHTS_FILE).stat().st_size < 25 * 2**20
    meta = json.loads((tiny_weights / METADATA_FILE).read_text())
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / WEIGHTS_FILE).write_bytes((tiny_weights / WEIGHTS_FILE).read_bytes())
    (bad / METADATA_FILE).write_text(json.dumps({**meta, "base_sha256": "0" * 64}))
    with pytest.raises(ConfigError, match="different base"):
        Verifier.load(bad)
    with pytest.raises(ConfigError, match="no verifier weights"):
        Verifier.load(tmp_path / "missing")


def test_smoke_training_run_writes_loadable_weights(tmp_path: Path) -> None:
    from medverify.verifier.train import TrainConfig, train

    data = tmp_path / "pairs"
    data.mkdir()
    for name in vdata.TRAIN_FILES:
        rows = _rows(24, hash(name) % 100) if name == "checkcovid_train" else []
        (data / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = TrainConfig(
        data_dir=data,
        out=tmp_path / "w",
        n_layers=1,
        frozen_layers=0,
        epochs=2,
        max_tokens=64,
        batch_size=8,
        swap_nei={"check-covid": 4},
    )
    threads = torch.get_num_threads()
    report = train(config.model_copy(update={"threads": 1 if threads > 1 else 2}))
    assert torch.get_num_threads() == threads  # the caller's thread count is restored
    assert len(report["history"]) == 2 and report["epochs_done"] == 2
    names = {"support", "contradict"}
    assert set(report["thresholds"]) == set(report["thresholds_float32"]) == names
    assert "int8" in report["thresholds_calibrated_on"]
    assert Verifier.load(tmp_path / "w", scoring="window_scales").thresholds == \
        report["thresholds"]
    verifier = Verifier.load(tmp_path / "w")
    # Every arithmetic decides with them until one is fitted its own (train thresholds).
    assert "thresholds_by_scoring" not in report
    assert verifier.thresholds == report["thresholds"]
    assert verifier.predict([("aspirin helps patients 1.", "Patients 1 improved.")]).shape == (1, 3)


def test_cli_train_verifier_help() -> None:
    from medverify.cli import main

    result = CliRunner().invoke(main, ["train", "verifier", "--help"])
    assert result.exit_code == 0 and "--smoke" in result.output


def test_shipped_weights_if_present() -> None:
    if not (DEFAULT_WEIGHTS / METADATA_FILE).is_file():
        pytest.skip("no shipped verifier weights yet")
    size = sum(f.stat().st_size for f in DEFAULT_WEIGHTS.iterdir())
    assert size <= 25 * 2**20
    verifier = Verifier.load()
    probs = verifier.predict([("Aspirin reduces fever.", "Aspirin reduced fever in a trial.")])
    assert probs.shape == (1, 3)


def test_swap_nei_takes_evidence_from_another_group() -> None:
    rows = [
        vdata.Pair(
            id=str(i),
            dataset="scifact",
            claim=f"{t} lowers blood pressure {i}",
            evidence=f"{t} trial {i}: blood pressure fell.",
            label="SUPPORTED",
            group=f"g{i}",
        )
        for i, t in enumerate(["aspirin", "statin", "aspirin", "insulin"])
    ]
    swapped = vdata.swap_nei(rows, 4, seed=0)
    assert len(swapped) == 4
    by_id = {r.id: r for r in rows}
    for pair in swapped:
        original = by_id[pair.id.removesuffix(":swap")]
        assert pair.label == "NOT_ENOUGH_INFO" and pair.evidence != original.evidence


def test_nei_pairs_add_extra_windows(tokenizer) -> None:
    evidence = " ".join(f"Sentence {i} is about an unrelated trial of drug {i}." for i in range(60))
    base = {
        "dataset": "check-covid",
        "claim": "Masks stop flu.",
        "evidence": evidence,
        "group": "g",
    }
    nei = vdata.Pair(id="n", label=N, **base)
    sup = vdata.Pair(id="s", label=S, **base)
    examples = vdata.to_examples(tokenizer, [nei, sup], max_tokens=64, nei_extra=2)
    assert [e.label for e in examples] == [N, N, N, S]
    assert len({e.window for e in examples[:3]}) == 3
    assert len(vdata.to_examples(tokenizer, [nei], max_tokens=64)) == 1


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_cached_layers_match_the_full_forward(tokenizer, layer: int) -> None:
    from medverify.verifier.infer import encode_pairs

    model = build_model(n_layers=2).eval()
    enc = encode_pairs(tokenizer, [("a claim", "short."), ("aspirin", "Aspirin lowers fever.")], 64)
    args = (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    hidden = model.hidden_at(*args, layer)
    assert np.allclose(
        model.forward_from(hidden, enc["attention_mask"], layer).detach().numpy(),
        model(*args).detach().numpy(),
        atol=1e-5,
    )


def test_cli_swap_counts_parse() -> None:
    from medverify.cli.train import _parse_counts

    assert _parse_counts("check-covid=150, scifact=0") == {"check-covid": 150, "scifact": 0}
    with pytest.raises(InputError):
        _parse_counts("scifact=lots")


def test_thresholds_follow_the_scoring_arithmetic() -> None:
    meta = {"thresholds": {"support": 0.25, "contradict": 0.35},
            "thresholds_by_scoring": {"onnx_int8": {"support": 0.35, "contradict": 0.325}}}
    assert thresholds_for(meta, "onnx_int8") == {"support": 0.35, "contradict": 0.325}
    assert thresholds_for(meta, "window_scales") == {"support": 0.25, "contradict": 0.35}
    assert thresholds_for({}, "onnx_int8") == {"support": 0.5, "contradict": 0.5}


def test_cli_train_thresholds_writes_the_arithmetic_own(tmp_path: Path, tiny_weights: Path
                                                         ) -> None:
    from medverify.cli import main

    data = tmp_path / "pairs"
    data.mkdir()
    for name in vdata.TRAIN_FILES:
        (data / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(40, 3)))
    weights = tmp_path / "w"
    weights.mkdir()
    for name in (WEIGHTS_FILE, METADATA_FILE):
        (weights / name).write_bytes((tiny_weights / name).read_bytes())
    before = json.loads((weights / METADATA_FILE).read_text())
    args = ["train", "thresholds", "--data-dir", str(data), "--weights", str(weights),
            "--scoring", "window_scales"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["held_out_pairs"] > 0 and 0 <= out["held_out_macro_f1"]["overall"] <= 1
    meta = json.loads((weights / METADATA_FILE).read_text())
    assert meta["thresholds_by_scoring"]["window_scales"] == out["thresholds"]
    assert meta["thresholds"] == before.get("thresholds")  # the shipped ones untouched
    assert Verifier.load(weights, scoring="window_scales").thresholds == out["thresholds"]
    missing = CliRunner().invoke(main, ["train", "thresholds", "--data-dir",
                                        str(tmp_path / "none"), "--weights", str(weights)])
    assert missing.exit_code != 0 and "not found" in missing.output


def test_cli_thresholds_offers_every_scoring_but_auto() -> None:
    """The CLI lists the modes by hand (importing the verifier would load torch for every
    command): they must stay the verifier's own."""
    from medverify.cli.train import thresholds as command
    from medverify.verifier.infer import SCORINGS

    [option] = [p for p in command.params if p.name == "scoring"]
    assert set(option.type.choices) == set(SCORINGS) - {"auto"}
