"""The curated trial summary (:mod:`medverify.trials.curate`): its sections, its records
(:class:`TrialSummary`, :class:`Section`, :class:`Sentence`), JSON pointers into a study
record, how registry values are written (:func:`text_of`: markdown escapes undone, whitespace
collapsed; :func:`enum_text`; the registry's labels in :data:`LABELS`), :class:`Line`, which
builds one templated sentence from literal text and registry fields, recording the pointer of
each field it copies, and :func:`left_out`, the note that ends a capped list. The section
builders are in :mod:`medverify.trials.sections`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
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
"""The 15 question sections, in order (the paper's 15 question categories)."""

EXTRA_SECTIONS: tuple[str, ...] = ("baseline characteristics",)
"""Sections after the 15 that no question of the paper asks for."""

ALL_SECTIONS: tuple[str, ...] = SECTIONS + EXTRA_SECTIONS
"""Every section of a summary, in order: the 15 question sections, then the extra ones."""

# Caps. Everything else is written whole: outcomes (registered and posted), result rows,
# groups, analyses, denominators, participant-flow periods, serious adverse events and the
# baseline characteristics. A capped list ends with a note (:func:`left_out`).
MAX_LIST = 25  # conditions, keywords, MeSH terms, other names, an arm's intervention names
MAX_EVENTS = 50  # non-serious adverse-event terms, the most participants affected first
NOTE_CHARS = 400  # a note names the left-out items when their names fit in this many chars

PHASE_LABELS: dict[str, str] = {
    "NA": "Not Applicable",
    "EARLY_PHASE1": "Early Phase 1",
    "PHASE1": "Phase 1",
    "PHASE2": "Phase 2",
    "PHASE3": "Phase 3",
    "PHASE4": "Phase 4",
}
"""designModule.phases codes and the registry's labels for them."""

OUTCOME_TYPE_LABELS: dict[str, str] = {
    "PRIMARY": "primary",
    "SECONDARY": "secondary",
    "OTHER_PRE_SPECIFIED": "other pre-specified",
    "POST_HOC": "post-hoc",
}
"""outcomeMeasures[].type codes and how the summary names them."""

LABELS: tuple[Mapping[str, str], ...] = (PHASE_LABELS, OUTCOME_TYPE_LABELS)
"""Every code-to-label table a sentence may write a field's value through."""


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


@functools.lru_cache(maxsize=1 << 16)
def pointer(path: Path) -> str:
    """The JSON pointer (RFC 6901) of a path of keys and indexes (cached: records share
    their paths)."""
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


# CommonMark backslash escapes: a backslash before ASCII punctuation stands for that mark.
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def unescape(text: str) -> str:
    """Registry text without its markdown backslash escapes (``Placebo-\\>OL`` ->
    ``Placebo->OL``, ``\\[9%\\]`` -> ``[9%]``); other backslashes stay."""
    return _ESCAPE.sub(r"\1", text) if "\\" in text else text


def text_of(value: Any) -> str:
    """How a scalar registry value is written: strings unescaped (:func:`unescape`) with
    whitespace collapsed, numbers as the JSON holds them."""
    if isinstance(value, str):
        return " ".join(unescape(value).split())
    return str(value)


def forms(value: Any) -> list[str]:
    """Every way a sentence may write a scalar field's value: as text, as an enum and through
    a label table."""
    text = text_of(value)
    out = [text, enum_text(text)]
    out += [table[value] for table in LABELS if isinstance(value, str) and value in table]
    return out


class Line:
    """Builds one sentence: literal text and registry fields, recording each field's pointer.
    A capped list (:meth:`values`) adds its note, to follow the sentence (:meth:`sentences`)."""

    def __init__(self, study: dict[str, Any]) -> None:
        self.study = study
        self.parts: list[str] = []
        self.pointers: list[str] = []
        self.notes: list[Sentence] = []

    def get(self, path: Path) -> Any:
        """The value at ``path``; None when the record has none there (an index into what is
        not a list, a key into what is not an object)."""
        node: Any = self.study
        try:
            for key in path:
                if key.__class__ is int and node.__class__ is not list:
                    return None
                node = node[key]
        except (KeyError, IndexError, TypeError):
            return None
        return node

    def has(self, path: Path) -> bool:
        return filled(self.get(path))

    def lit(self, text: str) -> Line:
        self.parts.append(text)
        return self

    def val(self, path: Path, enum: bool = False,
            labels: Mapping[str, str] | None = None) -> Line:
        """The field's value: as text, as an enum (``enum``) or through a label table; a
        missing or empty field writes nothing and records no pointer."""
        return self._write(path, self.get(path), enum, labels)

    def _write(self, path: Path, value: Any, enum: bool,
               labels: Mapping[str, str] | None) -> Line:
        if value is None:
            return self
        text = text_of(value)
        if not text:  # an empty field: nothing written, no pointer
            return self
        if labels is not None and isinstance(value, str) and value in labels:
            text = labels[value]
        elif enum:
            text = enum_text(text)
        self.parts.append(text)
        self.pointers.append(pointer(path))
        return self

    def opt(self, before: str, path: Path, after: str = "", enum: bool = False) -> Line:
        """``before value after`` when the field is filled, nothing otherwise."""
        value = self.get(path)
        if filled(value):
            self.parts.append(before)
            self._write(path, value, enum, None).parts.append(after)
        return self

    def at(self, node: Any, path: Path, key: str, before: str = "", after: str = "",
           enum: bool = False) -> Line:
        """As :meth:`opt` for field ``key`` of ``node``, the object at ``path`` the caller
        already holds (read without walking the record again)."""
        value = node.get(key) if node.__class__ is dict else None
        if filled(value):
            self.parts.append(before)
            self._write((*path, key), value, enum, None).parts.append(after)
        return self

    def values(self, path: Path, what: str, limit: int = MAX_LIST, enum: bool = False,
               sep: str = ", ", labels: Mapping[str, str] | None = None) -> Line:
        """A list field's items, joined; past ``limit`` the rest go to a note
        (:func:`left_out`, naming the list ``what``) that follows the sentence."""
        items = self.get(path) or []
        shown = range(min(len(items), limit))
        for i in shown:
            if i:
                self.lit(sep)
            self.val((*path, i), enum, labels)
        note = left_out(self.study, path, shown, what)
        if note is not None:
            self.notes.append(note)
        return self

    def group(self, path: Path, after: str = "") -> Line:
        """A group (the item at ``path`` of a module's group list) by its title, or by its
        id when it has no title; then ``after``."""
        title = (*path, "title")
        return self.val(title if self.has(title) else (*path, "id")).lit(after)

    def sentence(self) -> Sentence:
        # built from a str and a list of str: no validation needed (it is most of the cost)
        return Sentence.model_construct(text="".join(self.parts).strip(),
                                        pointers=list(self.pointers))

    def sentences(self) -> list[Sentence]:
        """The sentence, then the notes of the lists it cut."""
        return [self.sentence(), *self.notes]


def left_out(study: dict[str, Any], path: Path, shown: Iterable[int], what: str,
             name: Path = ()) -> Sentence | None:
    """The note ending a capped list: ``"<shown> of <all> <what> are shown; the other <n>
    are: <names>."`` (each left-out item's ``name`` field, or the item itself), or ``"...
    the other <n> are listed in the registry record."`` when the names are longer than
    :data:`NOTE_CHARS`. None when nothing was left out. The counts are the only numbers a
    summary writes that are not copied from a field: the note's first pointer names the
    list they count (checked by :mod:`medverify.trials.exactness`)."""
    line = Line(study)
    items = line.get(path)
    if not isinstance(items, list):
        return None
    kept = set(shown)
    rest = [i for i in range(len(items)) if i not in kept]
    if not rest:
        return None
    line.lit(f"{len(items) - len(rest)} of {len(items)} {what} are shown; "
             f"the other {len(rest)} ")
    line.pointers.append(pointer(path))
    names = [(*path, i, *name) for i in rest]
    length = sum(len(text_of(line.get(p))) + 2 for p in names if line.has(p))
    if length > NOTE_CHARS or not all(line.has(p) for p in names):
        return line.lit("are listed in the registry record.").sentence()
    line.lit("are: ")
    for j, item in enumerate(names):
        line.lit("; " if j else "").val(item)
    return line.lit(".").sentence()


def filled(value: Any) -> bool:
    """Whether a field has something to write (not missing, blank or an empty list)."""
    if isinstance(value, str):
        return bool(value.strip())
    return value is not None and value != []


def not_given(text: str) -> list[Sentence]:
    """A section the record cannot fill: one sentence saying so, with no pointers."""
    return [Sentence(text=text, pointers=[])]


def group_index(line: Line, path: Path) -> dict[Any, int]:
    """A module's group ids and their indexes in the group list at ``path``."""
    return {g.get("id"): i for i, g in enumerate(line.get(path) or []) if isinstance(g, dict)}


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
BASELINE = (*R, "baselineCharacteristicsModule")
