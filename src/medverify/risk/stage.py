"""The risk stage: texts -> forced-decoding traces -> features -> hallucination probability.

One :class:`RiskStage` holds the log-probability scorers (and, when scoring, the trained
classifier whose feature schema names them). A *text* is what gets one probability: a claim,
a sentence or a whole answer, scored as the answer to its question (``granularity
"answer"`` features over the text itself), which is how training examples are scored too, so
training and scoring see the same features. With ``rephrasings`` and a rephraser model, each
text is also scored under rephrased questions (features across rephrasings).

Used by ``medverify risk features|score`` and by the ``check`` pipeline when
``[risk] classifier`` is set. ``risk features --executor ray`` computes the blocks of a
feature file on an executor (:class:`FeatureBlockTask`, :func:`feature_blocks_on`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, ValidationError

from medverify.config import Config
from medverify.errors import ConfigError, MedverifyError
from medverify.files import append_record
from medverify.llm.facade import Model
from medverify.risk.classifier import LoadedRisk, predict_proba
from medverify.risk.features import build_schema, extract_features
from medverify.risk.persist import load_classifier
from medverify.risk.records import (
    FeatureExample,
    FeatureRow,
    FeatureSchema,
    LabeledExample,
    RiskScore,
    TokenTrace,
)
from medverify.risk.scorers import SCORERS, ScoreItem, Scorer, make_scorer, resolve_dtype

if TYPE_CHECKING:
    from medverify.executor import Executor

log = logging.getLogger(__name__)


class RiskText(BaseModel):
    """One text to score, with the question it answers and optional context."""

    model_config = ConfigDict(extra="forbid")

    id: str
    text: str
    question: str | None = None
    context: str | None = None


@dataclass
class RiskStage:
    scorers: list[Scorer]
    classifier: LoadedRisk | None = None
    rephrasings: int = 0
    rephraser: Model | None = None

    @classmethod
    def from_config(cls, config: Config, *, scorers: Sequence[str] | None = None,
                    classifier: Path | None = None, rephraser: Model | None = None,
                    need_classifier: bool = False) -> RiskStage:
        """Scorers from ``scorers``, else the classifier's schema, else ``[risk] scorers``;
        the classifier from ``classifier`` or ``[risk] classifier``."""
        directory = classifier or config.risk.classifier
        if need_classifier and directory is None:
            raise ConfigError("no risk classifier: pass --classifier DIR (train one with "
                              "`medverify risk train`) or set [risk] classifier")
        loaded = load_classifier(directory) if directory is not None else None
        specs = list(scorers or (loaded.schema.scorers if loaded else config.risk.scorers))
        if not specs:
            raise ConfigError("no log-probability scorer: pass --scorer SPEC (e.g. "
                              "hf:/path/to/model) or set [risk] scorers")
        made = [make_scorer(spec, config.risk) for spec in specs]
        rephrasings = _rephrasings(config, loaded)
        if rephrasings and rephraser is None:
            raise ConfigError("rephrased questions need a model to rephrase them: pass "
                              "--model SPEC" + (" (this classifier was trained with "
                                                "rephrasing features)" if loaded else ""))
        stage = cls(made, loaded, rephrasings, rephraser)
        if loaded is not None and [s.id for s in made] != loaded.schema.scorers:
            raise ConfigError(f"the classifier was trained on scorers {loaded.schema.scorers}, "
                              f"not {[s.id for s in made]}")
        if loaded is not None and stage.schema.names != loaded.schema.names:
            raise ConfigError("these scorers and settings do not produce the features the "
                              f"classifier was trained on (schema {loaded.schema.version})")
        if loaded is not None:
            _check_dtype(loaded, config)
        return stage

    @property
    def schema(self) -> FeatureSchema:
        """The feature schema these scorers produce (granularity ``answer``: one row per
        text)."""
        return build_schema([s.id for s in self.scorers], rephrasings=self.rephrasings > 0,
                            granularity="answer")

    async def _questions(self, question: str | None) -> list[str | None]:
        if not question or self.rephrasings == 0 or self.rephraser is None:
            return [question]
        from medverify.risk.api_variant import ApiRiskScorer

        helper = ApiRiskScorer(self.rephraser, rephraser=self.rephraser,
                               rephrasings=self.rephrasings)
        try:
            return [question, *await helper.rephrase(question)]
        except MedverifyError:  # the rephraser failed: this text gets no rephrasing
            return [question]  # features (listed missing), the others go on

    async def traces(self, texts: Sequence[RiskText]) -> list[dict[str, list[TokenTrace]]]:
        """Per text: scorer id -> its traces (the original question first, then the
        rephrasings)."""
        variants = [await self._questions(t.question) for t in texts]
        items = [ScoreItem(question=q, answer=t.text, context=t.context,
                           prompt_variant="original" if n == 0 else f"rephrase-{n}")
                 for t, questions in zip(texts, variants, strict=True)
                 for n, q in enumerate(questions)]
        out: list[dict[str, list[TokenTrace]]] = [{} for _ in texts]
        for scorer in self.scorers:
            traces = iter(await scorer.score(items))
            for index, questions in enumerate(variants):
                out[index][scorer.id] = [next(traces) for _ in questions]
        return out

    async def features(self, texts: Sequence[RiskText]) -> list[FeatureRow]:
        """One feature row per text, following :attr:`schema`."""
        rows = []
        for text, traces in zip(texts, await self.traces(texts), strict=True):
            found = extract_features(traces, granularity="answer",
                                     rephrasings=self.rephrasings > 0)
            rows.append(found[0].model_copy(update={"unit_id": text.id}))
        return rows

    async def score(self, texts: Sequence[RiskText]) -> list[RiskScore]:
        """P(HALLUCINATION) per text; a text whose features fail is an error, not a
        probability."""
        if self.classifier is None:
            raise ConfigError("scoring needs a trained classifier (--classifier DIR)")
        rows = await self.features(texts)
        out = []
        for text, row in zip(texts, rows, strict=True):
            base = {"unit_id": text.id, "granularity": "answer", "text": text.text,
                    "classifier": self.classifier.id}
            if all_failed(row, len(self.scorers)):
                out.append(RiskScore(**base, error="every scorer failed on this text"))
                continue
            try:
                probability = predict_proba(self.classifier, [row], schema=self.schema)[0]
            except MedverifyError as exc:
                out.append(RiskScore(**base, error=str(exc)))
                continue
            out.append(RiskScore(**base, probability=probability))
        return out


def _rephrasings(config: Config, loaded: LoadedRisk | None) -> int:
    """How many rephrasings to score under: what the classifier was trained with (its
    schema has rephrasing features or not), else ``[risk] rephrasings``."""
    if loaded is None:
        return config.risk.rephrasings
    trained_with = any(name.startswith("reph.") for name in loaded.schema.names)
    return (config.risk.rephrasings or 5) if trained_with else 0


def all_failed(row: FeatureRow, n_scorers: int) -> bool:
    """True when no scorer produced a token for the text."""
    counts = [row.values.get(f"m{i}.n_tokens", 0.0) for i in range(n_scorers)]
    return not any(counts)


async def units(answer: str, question: str | None, granularity: str) -> list[RiskText]:
    """What gets one probability: the answer's claims (rule decomposer), its sentences, or
    the whole answer."""
    if granularity == "answer":
        return [RiskText(id="answer", text=answer.strip(), question=question)]
    if granularity == "sentence":
        from medverify.decompose import segment

        return [RiskText(id=f"s{s.index + 1}", text=s.text, question=question)
                for s in segment(answer)]
    from medverify.decompose import DECOMPOSERS
    from medverify.records import Answer

    rules = DECOMPOSERS.create("rules", None)
    claims = await rules.decompose(Answer(text=answer, question=question))
    return [RiskText(id=c.id, text=c.text, question=question) for c in claims]


# -------------------------------------------------------------------------- feature files

FEATURE_BLOCK = 32
"""Texts scored together: a feature file is always computed block by block (a clean run
too), so a run resumed after a kill scores exactly the same batches and writes the same
numbers."""


class _PartialHeader(BaseModel):
    model_config = ConfigDict(extra="forbid")

    partial: str  # the resume key: what the rows were computed from


def partial_path(out: Path) -> Path:
    """Where finished blocks of ``out`` are appended until the whole file is written."""
    return out.with_name(out.name + ".partial")


async def feature_blocks(
    stage: RiskStage,
    examples: Sequence[LabeledExample],
    out: Path,
    *,
    key: str,
    block: int = FEATURE_BLOCK,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[FeatureExample], int]:
    """Feature lines of ``examples`` in order, resuming from ``out``'s partial file when it
    was written for the same ``key`` (scorers, settings, input); each finished block is
    appended and flushed there at once. Returns (lines, examples resumed)."""
    path = partial_path(out)
    done = _read_partial(path, key)
    by_id = {line.id: line for line in done}
    resumed = 0
    with _open_partial(path, key, resume=bool(done)) as handle:
        for start in range(0, len(examples), block):
            part = examples[start : start + block]
            if all(e.id in by_id for e in part):
                resumed += len(part)
            else:
                for line in await _block_lines(stage, part):
                    append_record(handle, line)
                    by_id[line.id] = line
                os.fsync(handle.fileno())
            if progress is not None:
                progress(len(part))
    return [by_id[e.id] for e in examples], resumed


async def _block_lines(stage: RiskStage, part: Sequence[LabeledExample]) -> list[FeatureExample]:
    texts = [RiskText(id=e.id, text=e.text, question=e.question, context=e.context)
             for e in part]
    rows = await stage.features(texts)
    return [FeatureExample(id=e.id, row=r, label=e.label, provenance=e.provenance)
            for e, r in zip(part, rows, strict=True)]


def _read_partial(path: Path, key: str) -> list[FeatureExample]:
    """The lines of a partial file written for ``key``; [] when there is none, it was
    written for other work, or it is unreadable (it is then started again)."""
    if not path.is_file():
        return []
    lines = path.read_text("utf-8", errors="replace").splitlines()
    try:
        if not lines or _PartialHeader.model_validate_json(lines[0]).partial != key:
            log.warning("%s was written for other scorers, settings or input: started again",
                        path)
            return []
    except ValidationError:
        log.warning("%s is unreadable: started again", path)
        return []
    done = []
    for line in lines[1:]:
        try:
            done.append(FeatureExample.model_validate_json(line))
        except ValidationError:  # a line a kill cut short: its block is redone, and the
            continue  # lines later runs appended after it still count
    return done


def _open_partial(path: Path, key: str, *, resume: bool) -> IO[str]:
    """The partial file opened for appending blocks: a new one with its header, or the one
    resumed, ended with a newline first if a kill cut its last line short (else the next
    line would be glued to the cut one and lost)."""
    if not resume:
        handle = path.open("w", encoding="utf-8")
        append_record(handle, _PartialHeader(partial=key))
        return handle
    with path.open("rb") as raw:
        size = raw.seek(0, os.SEEK_END)
        cut = size > 0 and raw.seek(size - 1) >= 0 and raw.read(1) != b"\n"
    handle = path.open("a", encoding="utf-8")
    if cut:
        handle.write("\n")
    return handle



# -------------------------------------------------------- feature files on an executor


_WORKER_STAGES: dict[str, RiskStage] = {}
"""Stages without a rephraser, kept per worker process (a Ray worker computes many blocks;
local models stay loaded). A stage with a rephraser is made per block: the rephraser's
client belongs to the event loop of that block."""


@dataclass(frozen=True)
class FeatureBlockTask:
    """The picklable chunk function of ``risk features`` on an executor: the feature lines
    of a block of examples, computed by a :class:`RiskStage` made, in the process that runs
    it, from the config, the scorer specs and the rephraser spec.

    ``factories`` are the scorer factories (spec prefix, factory) as the driver resolved
    them; the process that runs a block adopts them (``Registry.adopt``: a worker may not
    know a prefix registered in the driver's process only, or know another factory by that
    name), so every process makes the driver's scorers."""

    config: Config
    scorers: tuple[str, ...]
    rephraser: str | None = None
    factories: tuple[tuple[str, Callable[..., Scorer]], ...] = field(default=(),
                                                                      compare=False)

    @classmethod
    def for_config(cls, config: Config, scorers: Sequence[str],
                   rephraser: str | None = None) -> FeatureBlockTask:
        prefixes = dict.fromkeys(spec.strip().partition(":")[0] for spec in scorers)
        return cls(config, tuple(scorers), rephraser,
                   tuple((prefix, SCORERS.get(prefix)) for prefix in prefixes))

    def __call__(self, chunk: list[LabeledExample]) -> list[FeatureExample]:
        return asyncio.run(self._lines(chunk))

    async def _lines(self, chunk: list[LabeledExample]) -> list[FeatureExample]:
        for prefix, factory in self.factories:
            SCORERS.adopt(prefix, factory)
        if self.rephraser is None:
            return await _block_lines(self._cached_stage(), chunk)
        from medverify.llm.facade import get_model

        model = get_model(self.rephraser, self.config.llm)
        try:
            stage = RiskStage.from_config(self.config, scorers=list(self.scorers),
                                          rephraser=model)
            return await _block_lines(stage, chunk)
        finally:
            await model.aclose()

    def _cached_stage(self) -> RiskStage:
        key = "\x00".join([self.config.model_dump_json(), *self.scorers])
        stage = _WORKER_STAGES.get(key)
        if stage is None:
            stage = RiskStage.from_config(self.config, scorers=list(self.scorers))
            _WORKER_STAGES[key] = stage
        return stage


def feature_blocks_on(
    executor: Executor,
    task: Callable[[list[LabeledExample]], Sequence[FeatureExample]],
    examples: Sequence[LabeledExample],
    out: Path,
    *,
    key: str,
    block: int = FEATURE_BLOCK,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[FeatureExample], int]:
    """:func:`feature_blocks` with the blocks computed by ``task`` on ``executor`` (one
    chunk per block). Blocks come back in any order; each is appended to the partial file
    in input order (later blocks are held until the earlier ones arrive), so the partial
    file, and what a rerun after a kill resumes from, are those of :func:`feature_blocks`.
    ``progress`` is called as blocks complete (resumed blocks first)."""
    path = partial_path(out)
    done = _read_partial(path, key)
    by_id = {line.id: line for line in done}
    parts = [list(examples[start:start + block]) for start in range(0, len(examples), block)]
    todo = [part for part in parts if not all(e.id in by_id for e in part)]
    resumed = sum(len(part) for part in parts) - sum(len(part) for part in todo)
    if progress is not None and resumed:
        progress(resumed)
    if todo:
        executor.slots  # noqa: B018  (connects now: a cluster that is not there writes nothing)
    with _open_partial(path, key, resume=bool(done)) as handle:
        # Every block but the input's last is full, so the blocks to do, one after the
        # other, are cut by the executor into the same blocks: chunk i is todo[i].
        flat = [example for part in todo for example in part]
        arrived: dict[int, list[FeatureExample]] = {}
        written = 0
        for index, lines in executor.imap(task, flat, chunk_size=block, progress=progress):
            part = todo[index]
            if [line.id for line in lines] != [e.id for e in part]:
                raise RuntimeError(f"block {index}: the lines do not follow its examples")
            arrived[index] = lines
            while written in arrived:
                for line in arrived.pop(written):
                    append_record(handle, line)
                    by_id[line.id] = line
                os.fsync(handle.fileno())
                written += 1
    return [by_id[e.id] for e in examples], resumed


def _check_dtype(loaded: LoadedRisk, config: Config) -> None:
    """Warn when the classifier's features were computed in another dtype than the one
    ``[risk] dtype`` resolves to here (the scores then differ slightly)."""
    trained = loaded.card.trained_on.get("dtype")
    try:
        here = resolve_dtype(config.risk.dtype, config.risk.device)
    except ConfigError:  # no such device: the scorers say so when they run
        return
    if trained and trained != "auto" and trained != here:
        log.warning("the classifier's features were computed in %s; [risk] dtype is %s "
                    "(%s here; log-probs differ by ~0.01 nat: set [risk] dtype = %r to "
                    "match)", trained, config.risk.dtype, here, trained)
