"""A scripted chat model for the whole fact-check-and-correct flow, offline.

``factcheck_model()`` returns a reply function for :class:`~medverify.testing.ScriptedProvider`
(or ``FakeChatServer``) that answers every medverify prompt by its stage, recognised from
the system message (:func:`prompt_stage` compares it with the shipped prompt files):

- ``answer``: the RAG answer; by default :data:`DEMO_ANSWER`, with two planted errors: a
  wrong dose (``5000 mg``) and an invented contraindication (``asthma``);
- ``decompose``: one claim per answer sentence given to it;
- ``judge``: valid judge JSON (``testing.judge.judge_reply``): a claim is contradicted when
  it contains a ``wrong`` or ``invented`` phrase, else supported when at least ``support``
  of its content words (5-letter stems; numbers exactly) occur in its evidence;
- ``correct``: a ``wrong`` phrase is replaced by its right value; a fact with an
  ``invented`` phrase becomes the evidence sentence sharing the most words with it (a
  statement the evidence supports) or :data:`NO_SUCH` when none shares two; a fact with a
  ``stubborn`` phrase is only rephrased, so it stays wrong;
- ``rewrite_answer``: each edit's SENTENCE replaced by NOW (or removed);
- ``trace``: the passage sharing the most words with the fact.

Any other prompt raises :class:`ProviderError`. Tests override one stage by wrapping the
function: ``lambda r: "not json" if prompt_stage(r) == "correct" else base(r)``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping
from functools import cache
from importlib import resources

from medverify.errors import ProviderError
from medverify.judge.quotes import sentences
from medverify.llm.base import ChatRequest
from medverify.prompts import load_prompt, versions
from medverify.testing.judge import judge_reply

DEMO_QUESTION = "How should metformin be started for type 2 diabetes, and who should not take it?"
DEMO_ANSWER = (
    "Metformin is a first-line medicine for type 2 diabetes. Adults usually start metformin "
    "with 5000 mg daily, taken with meals. Metformin is contraindicated in people with "
    "asthma. Stomach upset is a common side effect of metformin."
)
DEMO_WRONG: Mapping[str, str] = {"5000 mg": "500 mg"}
DEMO_INVENTED: tuple[str, ...] = ("asthma",)
NO_SUCH = "The guideline excerpts list no such contraindication."

_WORD = re.compile(r"\w+")
_STOP_WORDS = ("the and for with are was were that this from has have its not may can "
               "all any who whom which into than then them they their")
_STOP = frozenset(_STOP_WORDS.split())
_FENCE_NAME = re.compile(r"\(fence (F[0-9a-f]{12})\)")
_SENTENCE_LINE = re.compile(r"^\[S(\d+)\] (.+)$", re.MULTILINE)

ReplyFunction = Callable[[ChatRequest], str]


# --------------------------------------------------------------------------- prompt parsing


@cache
def _heads() -> tuple[tuple[str, str], ...]:
    """(stage, the static start of its system prompt), longest first."""
    heads = []
    for entry in resources.files("medverify.prompts").iterdir():
        if not entry.is_dir():
            continue
        for version in versions(entry.name):
            head = load_prompt(entry.name, version).system.split("{{")[0].strip()[:400]
            if head:
                heads.append((entry.name, head))
    return tuple(sorted(heads, key=lambda h: -len(h[1])))


def prompt_stage(request: ChatRequest) -> str | None:
    """The medverify stage whose prompt made ``request`` (None for an unknown prompt)."""
    system = next((m.content for m in request.messages if m.role == "system"), "")
    return next((stage for stage, head in _heads() if system.startswith(head)), None)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(header, body) of every fenced block in a prompt (see ``prompts.untrusted``)."""
    found = _FENCE_NAME.search(text)
    if not found:
        return []
    name = re.escape(found.group(1))
    pattern = re.compile(rf"<<<{name} (.*?)>>>\n(.*?)\n<<<END {name}>>>", re.DOTALL)
    return [(m.group(1), m.group(2)) for m in pattern.finditer(text)]


def _user(request: ChatRequest) -> str:
    return request.messages[-1].content


def stems(text: str) -> set[str]:
    """Content words as 5-letter stems; numbers as they are."""
    words = _WORD.findall(text.casefold())
    return {w if w.isdigit() else w[:5] for w in words
            if w.isdigit() or (len(w) > 2 and w not in _STOP)}


def _shared(a: str, b: str) -> int:
    return len(stems(a) & stems(b))


# --------------------------------------------------------------------------- the model


class _Script:
    def __init__(self, answers: Mapping[str, str], wrong: Mapping[str, str],
                 invented: Collection[str], stubborn: Collection[str], support: float) -> None:
        self.answers = answers
        self.wrong = wrong
        self.invented = invented
        self.stubborn = stubborn
        self.support = support

    def __call__(self, request: ChatRequest) -> str:
        stage = prompt_stage(request)
        handler = {"answer": self.answer, "decompose": self.decompose, "judge": self.judge,
                   "correct": self.correct, "rewrite_answer": self.rewrite_answer,
                   "trace": self.trace}.get(stage or "")
        if handler is None:
            raise ProviderError(f"factcheck_model has no script for the {stage or 'unknown'} "
                                "prompt")
        return handler(_user(request))

    def answer(self, prompt: str) -> str:
        lowered = prompt.casefold()
        return next((text for key, text in self.answers.items() if key.casefold() in lowered),
                    DEMO_ANSWER)

    def decompose(self, prompt: str) -> str:
        given = prompt.split("ANSWER SENTENCES", 1)[-1]
        claims = [{"text": m.group(2).strip(), "sentence": int(m.group(1)), "markers": []}
                  for m in _SENTENCE_LINE.finditer(given)]
        return json.dumps({"claims": claims})

    def _flagged(self, text: str) -> bool:
        lowered = text.casefold()
        return any(k.casefold() in lowered for k in [*self.wrong, *self.invented])

    def rule(self, claim: str, passages: dict[str, str]) -> tuple[bool, bool]:
        if self._flagged(claim):
            return False, True
        words, evidence = stems(claim), stems(" ".join(passages.values()))
        share = len(words & evidence) / len(words) if words else 0.0
        return share >= self.support, False

    def judge(self, prompt: str) -> str:
        return judge_reply(prompt, self.rule)

    def correct(self, prompt: str) -> str:
        blocks = fenced_blocks(prompt)
        passages = {h.split(" ", 1)[0]: t for h, t in blocks if h.startswith("P")}
        facts = [(h.split(" ", 1)[0], t) for h, t in blocks if not h.startswith("P")]
        out = [self._correct_one(fid, text, passages) for fid, text in facts]
        return json.dumps({"facts": out})

    def _correct_one(self, fid: str, text: str, passages: dict[str, str]) -> dict[str, object]:
        lowered = text.casefold()
        first = next(iter(passages), None)
        if any(k.casefold() in lowered for k in self.stubborn):
            return {"id": fid, "rewritten": f"As the guideline says, {text}", "passage": first}
        if any(k.casefold() in lowered for k in self.invented):
            sentence, label = self._supported(text, passages)
            return {"id": fid, "rewritten": sentence or NO_SUCH, "passage": label}
        for bad, good in self.wrong.items():
            text = re.sub(re.escape(bad), good, text, flags=re.IGNORECASE)
        return {"id": fid, "rewritten": text, "passage": first}

    def _supported(self, text: str, passages: dict[str, str]) -> tuple[str | None, str | None]:
        candidates = [(s, label) for label, body in passages.items() for s in sentences(body)
                      if not self._flagged(s)]
        best = max(candidates, key=lambda c: _shared(text, c[0]), default=None)
        return best if best is not None and _shared(text, best[0]) >= 2 else (None, None)

    def rewrite_answer(self, prompt: str) -> str:
        blocks = fenced_blocks(prompt)
        answer = next((t for h, t in blocks if h == "answer"), "")
        for header, body in blocks:
            if header.startswith("E"):
                answer = _apply_edit(answer, header.split(" ", 1)[-1], body)
        return json.dumps({"answer": " ".join(answer.split())})

    def trace(self, prompt: str) -> str:
        blocks = fenced_blocks(prompt)
        fact = next((t for h, t in blocks if h == "FACT"), "")
        scored = sorted(((_shared(fact, t), h.split(" ", 1)[0]) for h, t in blocks
                         if h.startswith("P")), key=lambda s: -s[0])
        top = [label for score, label in scored if score > 0][:3]
        return json.dumps({"reasoning": "scripted: the passage sharing the most words",
                           "best": top[0] if top else None, "top3": top})


def _apply_edit(answer: str, kind: str, body: str) -> str:
    fields = dict(line.split(": ", 1) for line in body.split("\n") if ": " in line)
    sentence = fields.get("SENTENCE", "")
    replacement = fields.get("NOW", "") if kind == "replace" else ""
    return answer.replace(sentence, replacement, 1) if sentence else answer


def factcheck_model(answers: Mapping[str, str] | None = None, *,
                    wrong: Mapping[str, str] = DEMO_WRONG,
                    invented: Collection[str] = DEMO_INVENTED,
                    stubborn: Collection[str] = (),
                    support: float = 0.6) -> ReplyFunction:
    """A reply function scripting every stage of the fact-check flow (see the module doc).

    ``answers`` maps a phrase of the question to the RAG answer to give (default: the demo
    answer for any question); ``wrong`` maps a wrong phrase to its right value; ``invented``
    lists phrases of invented statements; ``stubborn`` lists phrases the corrector never
    fixes; ``support`` is the share of a claim's content words its evidence must contain."""
    return _Script(answers or {}, wrong, invented, stubborn, support)
