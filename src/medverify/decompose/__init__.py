"""Claim decomposition: an answer becomes a list of atomic, checkable :class:`Claim` records.

Two decomposers share one seam (:class:`Decomposer`) and one registry (:data:`DECOMPOSERS`):

- ``rules`` (:class:`RuleDecomposer`, :mod:`.rules`): offline and deterministic. It
  segments the answer into sentences and list items, drops what makes no checkable claim
  (questions, greetings, disclaimers, headings, list lead-ins), strips citation markers
  into ``Claim.markers``, splits coordinated predicates that share a subject
  (:mod:`.clauses`) and makes every claim name its subject (:mod:`.subjects`).
- ``llm`` (:class:`LLMDecomposer`, :mod:`.llm`): asks a chat model for atomic,
  self-contained claims, giving it the answer as numbered segments from the same
  segmenter; the model names the segment each claim comes from and the span is taken from
  our own segmentation.

Every claim's ``span`` is the exact offset range of its source segment in ``answer.text``
and ``sentence`` is that segment's index in :func:`segment` output (:mod:`.segment`). See
docs/decompose.md.

Plugins add decomposers through the ``medverify.decomposers`` entry-point group; a
decomposer factory is called as ``factory(config, model)`` with a
:class:`~medverify.config.Config` (or None) and a :class:`~medverify.llm.facade.Model` (or
None), e.g. ``mine = "my_package.decompose:MyDecomposer.from_config"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from medverify.decompose.clauses import VerbClass, split_coordination, split_semicolons
from medverify.decompose.llm import LLMDecomposer, parse_reply
from medverify.decompose.rules import RuleDecomposer, is_droppable
from medverify.decompose.segment import Segment, SegmentKind, clean_text, segment
from medverify.records import Answer, Claim
from medverify.registry import Registry

if TYPE_CHECKING:
    from medverify.config import Config
    from medverify.llm.facade import Model

__all__ = [
    "DECOMPOSERS",
    "Decomposer",
    "LLMDecomposer",
    "RuleDecomposer",
    "Segment",
    "SegmentKind",
    "VerbClass",
    "clean_text",
    "is_droppable",
    "parse_reply",
    "segment",
    "split_coordination",
    "split_semicolons",
]


@runtime_checkable
class Decomposer(Protocol):
    """Turns an answer into claims. ``name`` is the registry name; ``prompt_version`` is
    the prompt id (``"decompose/v2"``) for model-based decomposers, else None."""

    name: str
    prompt_version: str | None

    async def decompose(self, answer: Answer) -> list[Claim]: ...


class DecomposerRegistry(Registry[Decomposer]):
    """Decomposer factories by name, each called as ``factory(config, model)``."""

    def create(self, name: str, config: Config | None, model: Model | None = None
               ) -> Decomposer:
        """The decomposer ``name`` made from ``config`` (None: its defaults) and ``model``
        (ConfigError for an unknown name, or for "llm" without a model)."""
        return self.build(name, config, model)


DECOMPOSERS = DecomposerRegistry(
    "decomposer", group="medverify.decomposers", protocol=Decomposer,
    needs="it needs name, prompt_version and an async decompose(answer) method")
"""Decomposer factories by name: ``DECOMPOSERS.create(name, config, model)``."""
DECOMPOSERS.register("rules", "medverify.decompose.rules:RuleDecomposer.from_config")
DECOMPOSERS.register("llm", "medverify.decompose.llm:LLMDecomposer.from_config")
