"""Do the rule decomposer's claims name what they are about? Before and after subject
resolution (``RuleDecomposer(name_subjects=False)`` vs the default).

Answers: K-QA's physician answers (``raw/k-qa/questions_w_answers.jsonl``,
``Free_form_answer``, with ``Question``) and the demo's answers
(``src/medverify/data/demo_answers.jsonl``). The rules were written while reading the K-QA
claims; ExpertQA's validation answers (``answers/expertqa_val.jsonl``: LLM answers from
many fields, with ``question``) were not looked at and are reported apart as a held-out
check. K-QA and ExpertQA are skipped when ``../shared/data`` is absent.

The detector (:func:`unresolved`, written apart from the resolver, with its own word
lists) calls a claim "without a subject" when, after leading discourse markers ("However,",
"Also,", "In addition,", "Yes,"):

- **pronoun**: a referring pronoun (it, it's, its, they, they're, their, them, he, she,
  his, her) or a bare demonstrative (this, that, these, those followed by a verb, a
  generic noun such as "drug", "medication", "condition", or nothing) stands at the start
  of the claim, right after a leading subordinator or preposition ("When it lasts ..."), or
  at the start of the main clause after a leading phrase that ends with a comma ("In rare
  cases, it ..."; not after a subordinate clause with a subject of its own: "When a
  migraine lasts ..., it ..."). A dummy "it" ("It is important to ...", "It is recommended
  that ...", "It's worth noting that ...", "It takes 2 weeks to ...") is not a pronoun,
  but the first pronoun or bare demonstrative after it, before any content word, is
  ("It is important to take it with food.");
- **imperative**: the claim is an instruction (its first word, after "Do not", "Never",
  "Please", "Then", is a base-form verb such as take, start, avoid, apply, seek) and shares
  no content word (4+ letters, compared by their first five letters) with the question;
- **ellipsis**: the claim starts with a participle or predicate adjective followed by a
  preposition ("Used to treat acne.", "Available over the counter.").

The share is over all claims. The script also reruns bench_decompose.py's alignment with
human decompositions (ExpertQA, FActScore) with resolution off and on, to show what else
changed. The detector does not see pronouns deeper in a sentence
("..., but it can take 1 to 2 months"), where the antecedent is usually in the same claim.

    .venv/bin/python benchmarks/bench_decompose_subjects.py
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from medverify.decompose import RuleDecomposer
from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DEMO = ROOT / "src" / "medverify" / "data" / "demo_answers.jsonl"
KQA = Path("raw") / "k-qa" / "questions_w_answers.jsonl"
EXPERTQA = Path("answers") / "expertqa_val.jsonl"
SOURCES = ("k-qa", "demo", "expertqa")
SAMPLE = 20


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_MARKERS = re.compile(
    r"(?:(?:however|also|additionally|moreover|furthermore|therefore|thus|hence|so|but|and"
    r"|then|finally|overall|yes|no|importantly|notably|otherwise|instead|similarly|indeed"
    r"|in addition|in general|in fact|as a result|generally|typically|usually|often)"
    r"(?:,\s*|\s+))+", re.IGNORECASE)
_PRONOUNS = _set("it it's its they they're their them he she his her")
_DEMONSTRATIVES = _set("this that these those")
_GENERIC_NOUNS = _set(
    "drug drugs medication medications medicine medicines condition conditions disease "
    "diseases infection infections virus vaccine test treatment therapy supplement product "
    "cream agent agents disorder illness procedure pill pills tablet tablets antibiotic")
_VERBISH = _set(
    "is are was were be has have had can may might could should will would does do did "
    "means helps causes works occurs happens allows makes leads includes")
_LEADERS = _set(
    "if when while although though as after before during in for with because since unless "
    "once at on among from by without upon despite like unlike given")
_SUBORDINATORS = _set("if when while although though because since unless once as after "
                      "before whenever whereas")
_DUMMY = re.compile(
    r"it(?:'s|’s| is| was| may be| can be| might be| could be| would be| will be"
    r"| should be| has been| seems| appears| remains| becomes)"
    r"(?P<between>(?: [\w-]+){0,5}?) (?:to|that|if|whether|for(?: [\w-]+){1,5} to)\b"
    r"|it (?:takes|took|can take|may take|will take)(?: [\w-]+){0,5}? (?:to|for|before)\b",
    re.IGNORECASE)
_DUMMY_THAT = re.compile(
    r"it(?:'s|’s| is| was| may be| can be| might be| seems| appears| has been| should be"
    r"| must be| should also be)"
    r"(?: (?!(?:a|an|the|this|these|its|their|in|by|for|with|of|on|at|from|to)\b)[\w-]+){1,3}"
    r" (?:that|whether|if)\b|it(?:'s|’s| is)(?: also)? worth\b", re.IGNORECASE)
_DUMMY_WORDS = _set(
    "not also very highly generally usually often always still therefore thus typically "
    "strongly especially important essential crucial critical key vital necessary possible "
    "impossible likely unlikely unclear clear common uncommon rare safe unsafe advisable wise "
    "helpful useful normal recommended advised suggested required needed known believed "
    "thought estimated worth noting difficult hard easy reasonable appropriate okay ok fine "
    "good bad a an the best better more most less time idea unusual usual acceptable "
    "beneficial dangerous prudent imperative preferable true encouraged expected weeks days "
    "months years hours several few up only just safest easiest wisest simplest")
_IMPERATIVES = _set(
    "take start stop avoid use apply seek see call keep try drink eat wash get make give "
    "continue consider record check monitor ask wait rest limit increase reduce discontinue "
    "follow remember wear change elevate consult contact go visit tell let stay place sit "
    "measure repeat clean cover gargle soak schedule inform note inject administer taper "
    "decrease store swallow chew dissolve mix shake ensure")
_INSTRUCTION_LEAD = re.compile(r"(?:(?:do not|don't|don’t|never|always|please|then|now)\s+)+",
                               re.IGNORECASE)
_PARTICIPLES = _set(
    "used taken given approved prescribed indicated recommended available contraindicated "
    "administered applied known found caused characterized associated metabolized excreted "
    "absorbed sold marketed derived considered effective safe")
_PREPOSITIONS = _set("to for in by with as over under only at on from during after before "
                     "without when if orally once twice daily")
_FUNCTION = _set(
    "the a an and or of to in on for with at by from is are was were be been can may might "
    "could should would will do does did not no it its this that these those what how when "
    "why which who there their they them you your i me my we our he she his her about also "
    "any some much many more most very than then so if as into over such just have has had "
    "get take know use")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")


def _lower(token: str) -> str:
    return token.strip("\"'“”‘’()[]*_,.;:!?").lower().replace("’", "'")


def _referring(words: Sequence[str]) -> bool:
    """Does the claim continue here with a pronoun or a bare demonstrative?"""
    if not words:
        return False
    first = _lower(words[0])
    if first in _PRONOUNS:
        text = " ".join(words)
        dummy = _DUMMY_THAT.match(text) or (_DUMMY.match(text) and _dummy_ok(words))
        return not (first in ("it", "it's") and dummy)
    if first in _DEMONSTRATIVES:
        nxt = _lower(words[1]) if len(words) > 1 else ""
        return not nxt or nxt in _VERBISH or nxt in _GENERIC_NOUNS
    return False


def _dummy_ok(words: Sequence[str]) -> bool:
    """A dummy "it": the words between the verb and to/that are all dummy words."""
    text = " ".join(words)
    match = _DUMMY.match(text)
    assert match is not None
    between = (match.group("between") or "").split()  # None: "It takes 2 weeks to ..."
    return all(_lower(w) in _DUMMY_WORDS or _lower(w).isdigit() for w in between)


def _after_dummy(words: Sequence[str]) -> bool:
    """After a dummy "it" opener: a pronoun or demonstrative before any content word."""
    text = " ".join(words)
    match = _DUMMY_THAT.match(text) or _DUMMY.match(text)
    if match is None or (match.re is _DUMMY and not _dummy_ok(words)):
        return False
    rest = text[match.end():].split()
    for i, word in enumerate(rest):
        lower = _lower(word)
        if lower != "that" and _referring(rest[i:]):
            return True
        if lower not in _FUNCTION and lower not in _IMPERATIVES and lower not in _VERBISH:
            return False
    return False


def _positions(words: list[str]) -> list[list[str]]:
    """The word lists a pronoun subject may start: the claim, after a leading subordinator
    or preposition, the main clause after a leading phrase with a comma."""
    out = [words]
    if not words or _lower(words[0]) not in _LEADERS:
        return out
    out.append(words[1:])
    commas = [i for i, w in enumerate(words[:12]) if w.endswith(",")]
    own = _lower(words[0]) in _SUBORDINATORS and len(words) > 1 and not _referring(words[1:])
    if commas and not own:
        out.append(words[commas[0] + 1:])
    return out


def _stems(text: str) -> set[str]:
    return {w.lower()[:5] for w in _WORD.findall(text)
            if len(w) >= 4 and w.lower() not in _FUNCTION and w.lower() not in _IMPERATIVES}


def unresolved(claim: str, question: str | None) -> str | None:
    """Why ``claim`` does not name what it is about ("pronoun", "imperative", "ellipsis"),
    or None: see the module docstring."""
    body = _MARKERS.sub("", claim, count=1) if _MARKERS.match(claim) else claim
    words = body.split()
    if not words:
        return None
    if any(_referring(w) for w in _positions(words)) or _after_dummy(words):
        return "pronoun"
    instruction = _INSTRUCTION_LEAD.sub("", body, count=1).split()
    if (len(instruction) > 1 and _lower(instruction[0]) in _IMPERATIVES
            and _lower(instruction[1]) not in _VERBISH and _lower(instruction[1]) != "of"
            and not _stems(body) & _stems(question or "")):
        return "imperative"
    if (len(words) > 1 and _lower(words[0]) in _PARTICIPLES
            and _lower(words[1]) in _PREPOSITIONS):
        return "ellipsis"
    return None


def load_answers(data: Path) -> list[dict[str, Any]]:
    """{"source", "question", "text"} rows: K-QA's physician answers, the demo's, then
    ExpertQA's (held out)."""
    rows: list[dict[str, Any]] = []
    kqa = data / KQA
    if kqa.is_file():
        for line in kqa.read_text("utf-8").splitlines():
            row = json.loads(line)
            if (row.get("Free_form_answer") or "").strip():
                rows.append({"source": "k-qa", "question": row.get("Question"),
                             "text": row["Free_form_answer"]})
    for line in DEMO.read_text("utf-8").splitlines():
        row = json.loads(line)
        rows.append({"source": "demo", "question": row.get("question"), "text": row["text"]})
    expertqa = data / EXPERTQA
    if expertqa.is_file():
        for line in expertqa.read_text("utf-8").splitlines():
            row = json.loads(line)
            if (row.get("answer") or "").strip():
                rows.append({"source": "expertqa", "question": row.get("question"),
                             "text": row["answer"]})
    return rows


def measure(rows: Sequence[dict[str, Any]], resolve: bool) -> dict[str, Any]:
    decomposer = RuleDecomposer(name_subjects=resolve)
    reasons: Counter[str] = Counter()
    claims = 0
    rewritten: list[dict[str, str]] = []
    left: list[dict[str, str]] = []
    for row in rows:
        for claim in decomposer.decompose_text(row["text"], row["question"]):
            claims += 1
            reason = unresolved(claim.text, row["question"])
            if reason:
                reasons[reason] += 1
                left.append({"reason": reason, "claim": claim.text})
            if claim.original is not None:
                rewritten.append({"original": claim.original, "claim": claim.text,
                                  "question": row["question"] or ""})
    flagged = sum(reasons.values())
    return {"answers": len(rows), "claims": claims, "flagged": flagged,
            "share": flagged / claims if claims else 0.0, "reasons": dict(reasons),
            "rewritten": rewritten, "left": left}


def sample(rewritten: Sequence[dict[str, str]], size: int = SAMPLE) -> list[dict[str, str]]:
    """Every k-th rewritten claim, spread over the answers (deterministic)."""
    if len(rewritten) <= size:
        return list(rewritten)
    step = len(rewritten) / size
    return [rewritten[int(i * step)] for i in range(size)]


def regression(data: Path) -> list[dict[str, Any]]:
    """bench_decompose.py's counts and alignment with human claims, resolution off and on."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_decompose as base

    rows = []
    for name, loader in (("expertqa_val", base.expertqa), ("factscore", base.factscore)):
        try:
            examples = loader(data)
        except OSError:
            continue
        for resolve in (False, True):
            decomposer = RuleDecomposer(name_subjects=resolve)
            predicted = [[c.text for c in decomposer.decompose_text(e.text)] for e in examples]
            rows.append({"dataset": name, "subjects": "on" if resolve else "off",
                         "answers": len(examples), **base.counts(examples, predicted),
                         **base.alignment(examples, predicted)})
    return rows


def _regression_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    if not rows:
        return ["(skipped: ../shared/data is not available)"]
    lines = ["| dataset | subject resolution | answers | claims/answer | recall@0.5 | "
             "precision@0.5 | mean best F1 |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['dataset']} | {r['subjects']} | {r['answers']} | "
              f"{r['claims_per_answer']} | {r['recall@0.5']} | {r['precision@0.5']} | "
              f"{r['mean_best_f1']} |" for r in rows]
    return lines


def _row(name: str, result: dict[str, Any]) -> str:
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(result["reasons"].items())) or "-"
    return (f"| {name} | {result['answers']} | {result['claims']} | {result['flagged']} | "
            f"{100 * result['share']:.1f} % | {reasons} |")


def render(results: dict[str, dict[str, Any]], shown: Sequence[dict[str, str]],
           regressions: Sequence[dict[str, Any]] = ()) -> str:
    lines = ["# Claims that name their subject (rule decomposer)", "",
             "`.venv/bin/python benchmarks/bench_decompose_subjects.py`; the detector of a",
             "claim without a subject is defined in the script's docstring.", "",
             "\"all\" is K-QA and the demo; ExpertQA is the held-out check.", "",
             "| run | answers | claims | without a subject | share | by kind |",
             "|---|---|---|---|---|---|"]
    for name, result in results.items():
        lines.append(_row(name, result))
    after = results["after, all"]
    lines += ["", f"Claims rewritten to name their subject: {len(after['rewritten'])}.", "",
              f"## Sample of {len(shown)} rewritten claims (every k-th, for checking by hand)",
              "", "| answer's words | claim |", "|---|---|"]
    lines += [f"| {s['original']} | {s['claim']} |".replace("\n", " ") for s in shown]
    lines += ["", "## Claims still without a subject after resolution", ""]
    lines += [f"- ({s['reason']}) {s['claim']}" for s in after["left"]] or ["- none"]
    held_out = results.get("after, expertqa")
    if held_out is not None:
        lines += ["", f"## Held out (ExpertQA): {SAMPLE} rewritten claims (every k-th)", "",
                  "| answer's words | claim |", "|---|---|"]
        lines += [f"| {s['original']} | {s['claim']} |".replace("\n", " ")
                  for s in sample(held_out["rewritten"])]
        lines += ["", "Held-out claims still without a subject:", ""]
        lines += [f"- ({s['reason']}) {s['claim']}" for s in held_out["left"]] or ["- none"]
    lines += ["", "## Anything else changed? (bench_decompose.py's alignment with human "
              "claims)", ""]
    lines += _regression_table(regressions)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=data_dir())
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = load_answers(args.data)
    results: dict[str, dict[str, Any]] = {}
    main_rows = [r for r in rows if r["source"] != "expertqa"]
    for resolve, label in ((False, "before"), (True, "after")):
        results[f"{label}, all"] = measure(main_rows, resolve)
        for source in SOURCES:
            part = [r for r in rows if r["source"] == source]
            if part:
                results[f"{label}, {source}"] = measure(part, resolve)
    text = render(results, sample(results["after, all"]["rewritten"]), regression(args.data))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decompose_subjects.md").write_text(text, "utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
