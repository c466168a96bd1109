"""Tests of the synthetic NLI corpus builder on small made-up documents (no ../shared needed)."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from medverify.errors import InputError
from medverify.verifier import corpus as vc

DRUGS = ["metformin", "lisinopril", "atorvastatin", "ibuprofen", "warfarin"]
CONDITIONS = ["asthma", "migraine", "gout", "psoriasis", "glaucoma"]
FIELDS = ("id", "claim", "evidence", "label", "generator", "edit_type", "source", "doc_id", "group")


def _doc(k: int) -> vc.Document:
    """A made-up MedQuAD-like document whose sentences trigger every edit type."""
    f = f"zorbitis{k}"
    g = f"GENE{k}"
    m = ["alpha", "beta", "gamma", "delta", "kappa", "sigma", "theta", "omega"][k % 8] + str(k)
    drug = DRUGS[k % len(DRUGS)]
    cond = CONDITIONS[k % len(CONDITIONS)]
    paragraphs = [
        [
            f"{f.capitalize()}, also called {m} fever, is a rare disorder of the {g} pathway.",
            f"{f.capitalize()} is a condition that affects children in {k + 3} countries.",
            f"Treatment with {drug} usually reduces blood sugar within {k % 5 + 2} weeks.",
            f"About {k + 20} percent of affected people develop {cond} before the age of 30.",
            f"The recommended dose is {100 + k * 10} mg taken twice daily with food.",
        ],
        [
            f"Mutations in the {g} gene cause {f} in most families.",
            f"Magnetic resonance imaging (MRI) can show brain changes in {f} number {k}.",
            f"An MRI scan is often repeated to follow the {m} lesions over time.",
            f"{m.capitalize()} fever affects all patients with the {g} variant in a family.",
            f"However, most patients with {f} live long lives, which is reassuring to families.",
            f"Higher levels of {m} protein were found in the blood of affected women.",
        ],
    ]
    sentences = tuple(s for p in paragraphs for s in p)
    paras = tuple(i for i, p in enumerate(paragraphs) for _ in p)
    return vc.Document(f"d{k}", "medquad", f"medquad:{f}", sentences, paras, f, (f"{m} fever",))


DOCS = [_doc(k) for k in range(40)]
LEX = vc.Lexicons(drugs=DRUGS, conditions=CONDITIONS)
IDF = vc.document_idf(DOCS)


@pytest.fixture(scope="module")
def built() -> vc.BuildResult:
    return vc.build_corpus(DOCS, LEX, size=360, seed=3, max_repeats=1000)


@pytest.mark.parametrize(
    ("edit", "sentence", "expect"),
    [
        ("negation", "Zorbitis is a rare disorder of the skin.", "is not"),
        ("negation", "Zorbitis does not affect the liver or the kidneys.", "does affect"),
        ("number", "About 45 percent of affected people develop asthma early.", None),
        ("unit", "The recommended dose is 500 mg taken with food each day.", None),
        ("dose_frequency", "The drug is taken twice daily with food by most adults.", None),
        ("population", "The condition mostly affects children in Europe and Asia.", "adults"),
        ("direction", "Treatment with the drug increases blood pressure in a few.", "decreases"),
        ("temporal_causal", "Mutations in the ABC gene cause zorbitis in families.", "caused by"),
        ("temporal_causal", "Symptoms usually start before the age of ten years.", "after"),
        ("quantifier", "The disorder always starts in the first year of life.", None),
        ("quantifier", "All patients with the disorder have short stature.", "Only some"),
    ],
)
def test_each_edit_changes_the_claim(edit: str, sentence: str, expect: str | None) -> None:
    changed = vc.EDITS[edit](sentence, random.Random(0))
    assert changed is not None and changed != sentence
    if expect:
        assert expect in changed
    if edit in ("number", "dose_frequency", "unit"):
        assert vc.normalize(changed) != vc.normalize(sentence)


def test_edits_leave_citations_years_and_names_alone() -> None:
    rng = random.Random(0)
    assert vc.edit_number("It was first described in 1998 by doctors in Oslo.", rng) is None
    assert vc.edit_number("Type 2 diabetes is linked to the HCT-116 line (12).", rng) is None
    assert vc.edit_number("The prevalence was 1.2% (95% CI 0.8-1.8%).", rng) is not None
    changed = vc.edit_number("The prevalence was 1.2% (95% CI 0.8-1.8%).", rng)
    assert changed is not None and "95% CI" in changed


def test_supported_restatements() -> None:
    rng = random.Random(0)
    dropped = vc.clause_drop("However, the disorder is usually mild in most adults.", rng)
    assert dropped == "The disorder is usually mild in most adults."
    trail = vc.clause_drop("The gene makes a protein, which helps cells divide normally.", rng)
    assert trail == "The gene makes a protein."
    assert vc.fuse("It is rare.", "It affects the skin.") == "It is rare, and it affects the skin."
    defs = vc.abbreviations(["Magnetic resonance imaging (MRI) shows the brain clearly."])
    assert defs == [(0, "Magnetic resonance imaging", "MRI")]
    syn = vc.synonyms_of(DOCS[0])
    assert (0, "zorbitis0", "alpha0 fever") in syn


def test_every_type_labelled_and_changed(built: vc.BuildResult) -> None:
    by_type = Counter(p.edit_type for p in built.pairs)
    for label, (generator, types) in vc.FAMILIES.items():
        for t in types:
            assert by_type[t] > 0, t
        for p in built.pairs:
            if p.edit_type in types:
                assert p.label == label and p.generator == generator
    for p in built.pairs:
        in_evidence = vc.normalize(p.claim) in vc.normalize(p.evidence)
        if p.label == "CONTRADICTED":
            assert not in_evidence, p
        if p.edit_type == "extract":
            assert in_evidence, p
        if p.edit_type == "clause_drop":
            assert set(vc.normalize(p.claim).split()) <= set(vc.normalize(p.evidence).split())
        if p.label == "NOT_ENOUGH_INFO":
            assert not in_evidence, p
            assert vc.lacks_key_content(p.claim, p.evidence, IDF), p
        if p.edit_type == "bm25_hard":
            assert p.group not in p.evidence and p.doc_id != ""
        if p.edit_type == "drug_swap":
            assert any(d in p.claim.lower() for d in DRUGS)


def test_pairs_have_fields_and_short_evidence(built: vc.BuildResult) -> None:
    for p in built.pairs:
        row = p.to_dict()
        assert tuple(row) == FIELDS
        assert all(isinstance(v, str) and v for v in row.values()), row
        assert len(p.evidence.split()) <= 200
    assert len({p.id for p in built.pairs}) == len(built.pairs)


def test_labels_balanced(built: vc.BuildResult) -> None:
    counts = Counter(p.label for p in built.pairs)
    assert set(counts) == set(vc.LABELS)
    assert max(counts.values()) - min(counts.values()) <= 0.05 * len(built.pairs)
    assert len(built.pairs) >= 0.95 * 360
    report = built.report
    assert report["by_label"] == dict(sorted(counts.items()))
    assert sum(report["by_edit_type"].values()) == len(built.pairs)


def test_deterministic_for_a_seed(built: vc.BuildResult) -> None:
    again = vc.build_corpus(DOCS, LEX, size=360, seed=3, max_repeats=1000)
    assert [p.to_dict() for p in again.pairs] == [p.to_dict() for p in built.pairs]
    other = vc.build_corpus(DOCS, LEX, size=360, seed=4, max_repeats=1000)
    assert [p.to_dict() for p in other.pairs] != [p.to_dict() for p in built.pairs]


def test_near_duplicates_removed() -> None:
    copies = [
        vc.Document(
            f"copy{d.doc_id}",
            d.source,
            "copy:" + d.group,
            d.sentences,
            d.paras,
            d.focus,
            d.synonyms,
        )
        for d in DOCS[:20]
    ]
    result = vc.build_corpus(DOCS[:20] + copies, LEX, size=300, seed=1, max_repeats=1000)
    keys = [vc.normalize(p.claim) + "|" + vc.normalize(p.evidence) for p in result.pairs]
    assert len(keys) == len(set(keys))
    assert result.report["dropped"].get("duplicate", 0) > 0


def test_leakage_check_drops_planted_duplicate() -> None:
    planted = DOCS[0].sentences[2]
    fake_dev = {"fake_dev": ["An unrelated claim about something else entirely here.", planted]}
    result = vc.build_corpus(DOCS, LEX, size=300, seed=2, eval_sets=fake_dev, max_repeats=1000)
    target = vc.normalize(planted)
    for p in result.pairs:
        assert target not in vc.normalize(p.evidence)
        assert vc.normalize(p.claim) != target
    leaks = result.report["leakage"]["fake_dev"]
    assert leaks.get("evidence_near", 0) + leaks.get("claim_exact", 0) > 0
    index = vc.LeakageIndex(fake_dev)
    assert index.check(planted.upper()) == {"fake_dev": "exact"}
    assert index.check("Totally different words " + planted) == {"fake_dev": "near"}
    assert index.check("Nothing in common with any dev text at all, none.") == {}


def test_written_file_is_byte_identical(built: vc.BuildResult, tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"
    vc.write_jsonl_gz(built.pairs, first)
    vc.write_jsonl_gz(built.pairs, second)
    assert first.read_bytes() == second.read_bytes()
    assert vc.read_jsonl_gz(first) == built.pairs
    assert not list(tmp_path.glob(".*tmp"))


def test_refuses_evaluation_files(tmp_path: Path) -> None:
    path = tmp_path / "healthver_dev.jsonl"
    path.write_text("")
    with pytest.raises(InputError):
        vc.load_pair_evidence(path)


def test_loaders_and_cli_on_tiny_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "retrieval" / "toy").mkdir(parents=True)
    (data / "pairs").mkdir()
    rows = [{"doc_id": d.doc_id, "title": "", "text": " ".join(d.sentences)} for d in DOCS[:30]]
    (data / "retrieval" / "checkcovid").mkdir()
    (data / "retrieval" / "checkcovid" / "corpus.jsonl").write_text(
        "\n".join(json.dumps(r) for r in rows)
    )
    dev = {"claim": DOCS[1].sentences[1], "evidence": "x", "label": "SUPPORTED"}
    (data / "pairs" / "checkcovid_dev.jsonl").write_text(json.dumps(dev) + "\n")
    docs, _ = vc.load_sources(data)
    assert len(docs) == 30 and docs[0].source == "retrieval-checkcovid"
    assert vc.load_eval_sets(data) == {"checkcovid_dev": [dev["claim"], "x"]}

    from medverify.cli import main
    from medverify.cli.train import train

    registered = "corpus" in train.commands
    from medverify.cli import train_corpus

    out = tmp_path / "c.jsonl.gz"
    report = tmp_path / "r.json"
    args = [
        "train",
        "corpus",
        "--data-dir",
        str(data),
        "--out",
        str(out),
        "--size",
        "90",
        "--report",
        str(report),
    ]
    try:
        train.add_command(train_corpus.corpus)
        result = CliRunner().invoke(main, args)
    finally:
        if not registered:  # leave the CLI as _COMMAND_MODULES made it (docs/cli.md test)
            train.commands.pop("corpus", None)
    assert result.exit_code == 0, result.output
    pairs = vc.read_jsonl_gz(out)
    assert len(pairs) >= 80
    summary = json.loads(report.read_text())
    assert summary["size"] == len(pairs) and "checkcovid_dev" in summary["leakage"]
    assert not any(vc.normalize(dev["claim"]) == vc.normalize(p.claim) for p in pairs)
