"""The curated trial summary (:mod:`medverify.trials.curate`): its 15 sections, its records
(:class:`TrialSummary`, :class:`Section`, :class:`Sentence`), JSON pointers into a study
record, and :class:`Line`, which builds one templated sentence from literal text and registry
fields, recording the pointer of each field it copies. The section builders are in
:mod:`medverify.trials.sections`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

SECTIONS: tuple[str, ...] = (
    "definition",
    "condition",
    "design",
    "interventions",
    "arms",
    "eligibility",
    "primary outcome",
    "primary outcome statistical analysis",
    "primary outcome results",
    "secondary outcomes",
    "secondary outcome methods",
    "secondary outcome key results",
    "serious adverse events",
    "non-serious adverse events",
    "safety overview",
)
"""The 15 sections, in order (the paper's 15 question categories)."""

MAX_LIST = 10  # conditions, keywords, MeSH terms, other names, arm/intervention names
MAX_OUTCOMES = 10  # registered secondary outcomes; result measures per section
MAX_ROWS = 8  # classes x categories of one outcome measure
MAX_ANALYSES = 3  # statistical analyses per outcome measure
MAX_EVENTS = 10  # adverse-event terms per section, the most frequent first

class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Sentence(_Model):
    """One templated sentence and the JSON pointers of the registry fields it copies."""

    text: str
    pointers: list[str]


class Section(_Model):
    name: str
    sentences: list[Sentence]


class TrialSummary(_Model):
    nct_id: str
    title: str
    sections: list[Section]
    problems: list[str] = []  # e.g. a result row naming a group the record does not list

    def section(self, name: str) -> Section:
        for section in self.sections:
            if section.name == name:
                return section
        raise KeyError(name)


Path = tuple[str | int, ...]
_MISSING = object()


def pointer(path: Path) -> str:
    """The JSON pointer (RFC 6901) of a path of keys and indexes."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def resolve(study: dict[str, Any], ref: str) -> Any:
    """The value a pointer names; KeyError when it names nothing."""
    node: Any = study
    for raw in ref.split("/")[1:]:
        key = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise KeyError(ref)
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            raise KeyError(ref)
    return node


def enum_text(code: str) -> str:
    """How a registry enum code is written: ``PLACEBO_COMPARATOR`` -> ``placebo comparator``."""
    return code.replace("_", " ").lower()


def text_of(value: Any) -> str:
    """How a scalar registry value is written: strings with collapsed whitespace, numbers
    as the JSON holds them."""
    if isinstance(value, str):
        return " ".join(value.split())
    return str(value)


class Line:
    """Builds one sentence: literal text and registry fields, recording each field's pointer."""

    def __init__(self, study: dict[str, Any]) -> None:
        self.study = study
        self.parts: list[str] = []
        self.pointers: list[str] = []

    def get(self, path: Path) -> Any:
        node: Any = self.study
        for key in path:
            if isinstance(key, int):
                node = node[key] if isinstance(node, list) and key < len(node) else _MISSING
            else:
                node = node.get(key, _MISSING) if isinstance(node, dict) else _MISSING
            if node is _MISSING:
                return None
        return node

    def has(self, path: Path) -> bool:
        value = self.get(path)
        return value is not None and value != "" and value != []

    def lit(self, text: str) -> Line:
        self.parts.append(text)
        return self

    def val(self, path: Path, enum: bool = False) -> Line:
        value = self.get(path)
        text = text_of(value)
        self.parts.append(enum_text(text) if enum else text)
        self.pointers.append(pointer(path))
        return self

    def opt(self, before: str, path: Path, after: str = "", enum: bool = False) -> Line:
        """``before value after`` when the field is filled, nothing otherwise."""
        if self.has(path):
            self.lit(before).val(path, enum).lit(after)
        return self

    def values(self, path: Path, limit: int = MAX_LIST, enum: bool = False,
               sep: str = ", ") -> Line:
        """A list field's items, joined; capped at ``limit`` with a note."""
        items = self.get(path) or []
        for i in range(min(len(items), limit)):
            if i:
                self.lit(sep)
            self.val((*path, i), enum)
        if len(items) > limit:
            self.lit(" and others listed in the record")
        return self

    def sentence(self) -> Sentence:
        return Sentence(text="".join(self.parts).strip(), pointers=list(self.pointers))


def not_given(text: str) -> list[Sentence]:
    """A section the record cannot fill: one sentence saying so, with no pointers."""
    return [Sentence(text=text, pointers=[])]


P = ("protocolSection",)
R = ("resultsSection",)
IDENT = (*P, "identificationModule")
STATUS = (*P, "statusModule")
DESIGN = (*P, "designModule")
ARMS = (*P, "armsInterventionsModule")
ELIG = (*P, "eligibilityModule")
OUTCOMES = (*P, "outcomesModule")
FLOW = (*R, "participantFlowModule")
MEASURES = (*R, "outcomeMeasuresModule", "outcomeMeasures")
AE = (*R, "adverseEventsModule")
