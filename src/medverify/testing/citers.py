"""Scripted models under test with different citation habits, and a small offline study.

A :class:`CitingModel` is a reply function for :class:`ScriptedProvider`: it finds the
question in the request's last user message, looks up the question's reference document
and answers with that document's sentences, citing the document's page on a local
:class:`~medverify.testing.page_server.PageServer` (or not) according to its habit:

``careful``        2-3 sentences of the reference; JSON citing the reference page.
``overreaching``   the same plus one plausible but unsupported sentence; cites the page and
                   an invented page on the same server (404).
``hallucinating``  sentences of the reference, but only invented URLs (a 404 on the server
                   and a host that does not resolve).
``freetext``       prose with the URL inline (no JSON); every third question a broken
                   JSON object (``{answer: ...``).
``unreliable``     per question one of: a refusal, an empty reply, the same URL ten times,
                   an answer with no sources.

Everything is deterministic: the choices depend on the seed and the question text only.

>>> docs, questions = study_documents(), study_questions()
>>> with PageServer.from_documents(docs) as pages:
...     specs = register_citing_models(HABITS, references_for(questions), pages.url_for)
...     # specs == {"citer-careful": "fake:citer-careful", ...}
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from urllib.parse import urljoin

from medverify.bench.records import Question
from medverify.errors import ConfigError
from medverify.llm.base import ChatRequest
from medverify.records import Document
from medverify.testing.fake_provider import ScriptedProvider, register_fake
from medverify.testing.page_server import slug
from medverify.text import flat_sentences

HABITS = ("careful", "overreaching", "hallucinating", "freetext", "unreliable")
UNRELIABLE_KINDS = ("refusal", "empty", "repeated", "no_sources")
REFUSAL = "I'm sorry, I can't provide medical advice."
NO_REFERENCE = "I could not find a reliable reference for this question."
UNRESOLVABLE_HOSTS = (
    "https://www.example-medical-journal.invalid/articles/{slug}-2019",
    "https://health-library.example-clinic.invalid/conditions/{slug}",
)
UNSUPPORTED_STATEMENTS = (
    "Most people with this condition also benefit from a daily vitamin D supplement of "
    "4,000 IU.",
    "Recent studies show that drinking green tea three times a day halves the risk of "
    "complications.",
    "About 60 percent of adults develop this condition at some point in their lives.",
    "Symptoms usually disappear completely within 48 hours, even without treatment.",
    "Doctors now recommend an annual blood test for everyone over 30 to detect it early.",
    "Eating two bananas a day is enough to prevent the condition from coming back.",
)

_WORD = re.compile(r"[a-z0-9]{3,}")


def _stable_int(*parts: object) -> int:
    text = "\x00".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def _normal(text: str) -> str:
    return " ".join(text.casefold().split())


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.casefold()))


def sentences(text: str) -> list[str]:
    """The sentences of a plain text (split after . ! ? before a capital or digit)."""
    return flat_sentences(text)


def last_user_text(request: ChatRequest) -> str:
    """The content of the request's last user message ("" when it has none)."""
    users = [m.content for m in request.messages if m.role == "user"]
    return users[-1] if users else ""


class CitingModel:
    """A model under test with one citation habit (see the module docstring).

    ``references`` maps question text -> reference document; ``url_for(doc_id)`` gives
    the URL of a document's page (``PageServer.url_for``).
    """

    def __init__(self, habit: str, references: Mapping[str, Document],
                 url_for: Callable[[str], str], *, seed: int = 0) -> None:
        if habit not in HABITS:
            raise ConfigError(f"unknown citing habit {habit!r}: choose one of {', '.join(HABITS)}")
        self.habit = habit
        self.references = dict(references)
        self.url_for = url_for
        self.seed = seed
        self._normalized = sorted(((_normal(q), q) for q in self.references),
                                  key=lambda item: -len(item[0]))
        ranked = sorted(self.references, key=lambda q: _stable_int(seed, habit, q))
        self._rank = {q: i for i, q in enumerate(ranked)}

    def __repr__(self) -> str:
        return f"CitingModel({self.habit!r}, {len(self.references)} questions, seed={self.seed})"

    def __call__(self, request: ChatRequest) -> str:
        question = self.find_question(last_user_text(request))
        if question is None:
            return self._unknown()
        return getattr(self, f"_{self.habit}")(question, self.references[question])

    # --- finding the question ----------------------------------------------------------

    def find_question(self, message: str) -> str | None:
        """The known question in ``message``: a verbatim (whitespace- and case-insensitive)
        occurrence, else the question sharing most words with it (at least half of its
        words); None when there is none."""
        text = _normal(message)
        for normalized, question in self._normalized:
            if normalized and normalized in text:
                return question
        return self._closest(_words(message))

    def _closest(self, words: set[str]) -> str | None:
        best, best_share = None, 0.5
        for question in self.references:
            own = _words(question)
            share = len(own & words) / len(own) if own else 0.0
            if share >= best_share and (best is None or share > best_share):
                best, best_share = question, share
        return best

    def slot(self, question: str, n: int) -> int:
        """Which of ``n`` variants ``question`` gets: known questions are spread evenly
        (their rank in a seeded order, modulo n), others by hash."""
        rank = self._rank.get(question)
        return (rank if rank is not None else _stable_int(self.seed, question)) % n

    def unreliable_kind(self, question: str) -> str:
        return UNRELIABLE_KINDS[self.slot(question, len(UNRELIABLE_KINDS))]

    # --- pieces ------------------------------------------------------------------------

    def _rng(self, question: str) -> random.Random:
        return random.Random(_stable_int(self.seed, self.habit, question))

    def answer_sentences(self, question: str, doc: Document) -> list[str]:
        """2-3 sentences of the reference, in document order (fewer if it has fewer)."""
        found = sentences(doc.text)
        rng = self._rng(question)
        k = min(len(found), rng.choice((2, 3)))
        return [found[i] for i in sorted(rng.sample(range(len(found)), k))]

    def _page(self, doc: Document) -> dict[str, str]:
        return {"url": self.url_for(doc.doc_id), "title": doc.title or doc.doc_id}

    def _invented_local(self, doc: Document) -> dict[str, str]:
        url = urljoin(self.url_for(doc.doc_id), f"/articles/{slug(doc.doc_id)}-review-2021")
        return {"url": url, "title": f"{doc.title or doc.doc_id}: a clinical review"}

    def _invented_remote(self, question: str, doc: Document) -> dict[str, str]:
        pattern = self._rng(question + "\x00host").choice(UNRESOLVABLE_HOSTS)
        return {"url": pattern.format(slug=slug(doc.doc_id)),
                "title": f"{doc.title or doc.doc_id} (journal article)"}

    @staticmethod
    def _json(answer: str, sources: Sequence[dict[str, str]]) -> str:
        return json.dumps({"answer": answer, "sources": list(sources)}, ensure_ascii=False)

    # --- habits ------------------------------------------------------------------------

    def _unknown(self) -> str:
        return NO_REFERENCE if self.habit == "freetext" else self._json(NO_REFERENCE, [])

    def _careful(self, question: str, doc: Document) -> str:
        return self._json(" ".join(self.answer_sentences(question, doc)), [self._page(doc)])

    def _overreaching(self, question: str, doc: Document) -> str:
        extra = self._rng(question + "\x00extra").choice(UNSUPPORTED_STATEMENTS)
        answer = " ".join([*self.answer_sentences(question, doc), extra])
        return self._json(answer, [self._page(doc), self._invented_local(doc)])

    def _hallucinating(self, question: str, doc: Document) -> str:
        sources = [self._invented_local(doc), self._invented_remote(question, doc)]
        return self._json(" ".join(self.answer_sentences(question, doc)), sources)

    def _freetext(self, question: str, doc: Document) -> str:
        answer = " ".join(self.answer_sentences(question, doc))
        page = self._page(doc)
        if self.slot(question, 3) == 0:  # a JSON object that does not parse
            return f'{{answer: "{answer}", sources: ["{page["url"]}"]}}'
        return f"{answer}\n\nYou can read more in \"{page['title']}\": {page['url']}"

    def _unreliable(self, question: str, doc: Document) -> str:
        kind = self.unreliable_kind(question)
        if kind == "refusal":
            return REFUSAL
        if kind == "empty":
            return ""
        answer = " ".join(self.answer_sentences(question, doc))
        sources = [self._page(doc)] * 10 if kind == "repeated" else []
        return self._json(answer, sources)


def register_citing_models(habits: Sequence[str], references: Mapping[str, Document],
                           url_for: Callable[[str], str], *, delay_s: float = 0.0,
                           prefix: str = "citer", seed: int = 0) -> dict[str, str]:
    """Register one :class:`ScriptedProvider` per habit (``fake:<prefix>-<habit>``);
    returns label -> model spec."""
    specs: dict[str, str] = {}
    for habit in habits:
        label = f"{prefix}-{habit}"
        model = CitingModel(habit, references, url_for, seed=seed)
        register_fake(label, ScriptedProvider(model, name=label, model=label, delay_s=delay_s))
        specs[label] = f"fake:{label}"
    return specs


def references_for(questions: Sequence[Question]) -> dict[str, Document]:
    """Question text -> reference document, for the questions that have one."""
    return {q.text: q.reference for q in questions if q.reference is not None}


# --- a small offline study ---------------------------------------------------------------
# Original short texts written for medverify's examples and tests; general health facts at
# the level of a patient leaflet, not medical advice.

_STUDY: tuple[tuple[str, str, str, str, str], ...] = (
    # (doc_id, title, text, question source, question)
    ("high-blood-pressure", "High blood pressure",
     "High blood pressure, or hypertension, means the force of blood against the artery "
     "walls stays too high. It often causes no symptoms, so many people do not know they "
     "have it. Over years it raises the risk of heart attack, stroke and kidney disease. "
     "Eating less salt, staying active and limiting alcohol can lower blood pressure. "
     "When lifestyle changes are not enough, doctors may prescribe medicines such as ACE "
     "inhibitors or diuretics.",
     "generated", "What health problems can untreated high blood pressure lead to?"),
    ("type-2-diabetes", "Type 2 diabetes",
     "Type 2 diabetes is a condition in which the body does not use insulin well, so "
     "blood sugar rises. Common signs include thirst, frequent urination and tiredness. "
     "Being overweight and physically inactive increase the risk of developing it. "
     "Regular exercise and a balanced diet help keep blood sugar in range. Many people "
     "also take metformin, a tablet that lowers the amount of sugar the liver releases.",
     "consumer", "my dad just got told he has type 2 diabetes, what does that even mean "
     "and is there a pill for it?"),
    ("asthma", "Asthma",
     "Asthma is a long-term condition in which the airways become inflamed and narrow. "
     "It causes wheezing, coughing, chest tightness and shortness of breath. Attacks can "
     "be triggered by pollen, dust mites, cold air, smoke or exercise. Reliever inhalers "
     "open the airways quickly during symptoms. Preventer inhalers with a low dose of "
     "steroid reduce the inflammation when used every day.",
     "generated", "Which inhalers are used to treat asthma and how do they differ?"),
    ("migraine", "Migraine",
     "A migraine is a moderate or severe headache, often felt as a throbbing pain on one "
     "side of the head. Many people also feel sick and are sensitive to light or sound. "
     "Some people see flashing lights or zigzag lines, called an aura, before the pain "
     "starts. Attacks can last from four hours to three days. Painkillers work best when "
     "taken at the first sign of an attack.",
     "consumer", "i get these awful one sided headaches with zigzag lights before them, "
     "is that a migraine?"),
    ("iron-deficiency-anaemia", "Iron deficiency anaemia",
     "Iron deficiency anaemia happens when the body lacks enough iron to make "
     "haemoglobin, the protein that carries oxygen in red blood cells. It can cause "
     "tiredness, pale skin and shortness of breath. Heavy periods, pregnancy and "
     "bleeding in the gut are common causes. A blood test can confirm it. It is usually "
     "treated with iron tablets taken for several months.",
     "generated", "What are the common causes of iron deficiency anaemia?"),
    ("influenza", "Flu (influenza)",
     "Flu is an infection of the nose, throat and lungs caused by influenza viruses. It "
     "usually starts suddenly with fever, aching muscles and a dry cough. Most healthy "
     "people recover within about a week without special treatment. Resting, drinking "
     "fluids and taking paracetamol can ease the symptoms. A yearly flu vaccine is the "
     "best way to lower the chance of getting flu.",
     "consumer", "how long does the flu usually last and what can I do at home to feel "
     "better??"),
    ("heartburn-and-reflux", "Heartburn and acid reflux",
     "Acid reflux is when stomach acid flows back up into the food pipe. The main "
     "symptom is heartburn, a burning feeling in the middle of the chest. It is often "
     "worse after eating or when lying down. Eating smaller meals and not eating within "
     "three hours of bedtime can help. Antacids and proton pump inhibitors reduce "
     "stomach acid.",
     "generated", "What lifestyle changes can reduce heartburn from acid reflux?"),
    ("urinary-tract-infection", "Urinary tract infection",
     "A urinary tract infection is an infection of the bladder, kidneys or the tubes "
     "that carry urine. Symptoms include pain or burning when passing urine and needing "
     "to go often. Women get them more often than men because their urethra is shorter. "
     "Most bladder infections are treated with a short course of antibiotics. A high "
     "temperature or pain in the back can mean the kidneys are infected, which needs "
     "urgent care.",
     "consumer", "it burns when i pee and i have to go all the time. do i need "
     "antibiotics for a uti?"),
    ("osteoporosis", "Osteoporosis",
     "Osteoporosis is a condition that makes bones weak and more likely to break. It "
     "develops slowly over several years and often goes unnoticed until a fall causes a "
     "fracture. It is most common in women after the menopause. Calcium, vitamin D and "
     "weight-bearing exercise help keep bones strong. A bone density scan can measure "
     "how strong the bones are.",
     "generated", "How is osteoporosis detected and who is most at risk?"),
    ("hay-fever", "Hay fever",
     "Hay fever is an allergic reaction to pollen, usually from grass, trees or weeds. "
     "It causes sneezing, a runny or blocked nose and itchy, watery eyes. Symptoms are "
     "usually worse between late March and September, when pollen counts are high. "
     "Antihistamine tablets and steroid nasal sprays can relieve the symptoms. Keeping "
     "windows closed and showering after being outside reduce contact with pollen.",
     "consumer", "every spring my eyes itch and i cant stop sneezing, what helps with "
     "hay fever?"),
    ("gastroenteritis", "Gastroenteritis",
     "Gastroenteritis is an infection of the stomach and bowel that causes diarrhoea and "
     "vomiting. It is often caused by a virus such as norovirus and spreads easily. Most "
     "people get better within a few days. The main risk is dehydration, so it is "
     "important to keep drinking small sips of water. Washing hands with soap and water "
     "helps stop it from spreading.",
     "generated", "What is the main risk of gastroenteritis and how can it be avoided?"),
    ("insomnia", "Insomnia",
     "Insomnia means regularly having trouble falling asleep or staying asleep. It can "
     "leave people tired, irritable and unable to concentrate during the day. Stress, "
     "caffeine, alcohol and screens before bed can all make it worse. Going to bed and "
     "getting up at the same time every day helps. Cognitive behavioural therapy for "
     "insomnia is recommended as the first treatment for long-term insomnia.",
     "consumer", "i have not slept properly in months, what actually works for "
     "insomnia?"),
)


def medquad_questions(n: int, *, source: str = "medquad") -> list[Question]:
    """Up to ``n`` questions from the MedQuAD sample shipped with medverify, one per distinct
    topic ("What is <topic> and how is it treated?"), each keeping its NIH page as the
    reference: a larger study than :func:`study_questions`, for examples and benchmarks."""
    if n < 1:
        return []
    path = resources.files("medverify.data") / "medquad_sample.jsonl"
    questions: list[Question] = []
    seen: set[str] = set()
    for line in path.read_text("utf-8").splitlines():
        doc = Document.model_validate(json.loads(line))
        topic = (doc.title or "").strip()
        if not topic or topic.casefold() in seen:
            continue
        seen.add(topic.casefold())
        questions.append(Question(id=f"{source}-{len(questions) + 1}", source=source,
                                  text=f"What is {topic} and how is it treated?",
                                  reference=doc))
        if len(questions) == n:
            break
    return questions


def study_documents() -> list[Document]:
    """Twelve short, original, patient-facing reference documents (one per condition)."""
    return [Document(doc_id=doc_id, title=title, text=text, source="medverify-study")
            for doc_id, title, text, _, _ in _STUDY]


def study_questions() -> list[Question]:
    """One question per study document, from two sources: ``generated`` (written from
    the document) and ``consumer`` (phrased like a patient forum post); each keeps its
    document as ``reference``."""
    docs = {doc.doc_id: doc for doc in study_documents()}
    return [Question(id=f"q-{doc_id}", text=text, source=source, reference=docs[doc_id])
            for doc_id, _, _, source, text in _STUDY]
