"""The confidence card: what ``medverify calibrate`` fitted, for which judge, on what data,
and how precise each category's sure verdicts were; read back by name or path.

A card is JSON with ``kind`` :data:`CARD_KIND`. Cards are found by path, or by name in
``$MEDVERIFY_HOME/calibrations/NAME.json`` (a user's own, written by ``calibrate --apply``)
and then among the cards shipped in ``medverify/data/calibrations/``.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from medverify.config import home
from medverify.errors import ConfigError
from medverify.judge.confidence.signals import FEATURES
from medverify.records import Category

CARD_KIND = "medverify.confidence-card"
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "data" / "calibrations"

RIGHT: dict[Category, frozenset[str]] = {
    Category.FACT: frozenset({"SUPPORTED"}),
    Category.HALLUCINATION: frozenset({"CONTRADICTED", "NOT_SUPPORTED"}),
    Category.COVERAGE_GAP: frozenset({"NOT_ENOUGH_INFO", "NOT_SUPPORTED"}),
}
"""The gold labels on which a category is right."""

TARGETS: dict[str, float] = {"FACT": 0.70, "HALLUCINATION": 0.50, "COVERAGE_GAP": 0.50}
"""The default precision a category must reach before its verdicts are shown as sure (the
built-in judge's targets, ``judge.calibration.TARGETS``); ``calibrate --target`` raises them."""


class CategoryFit(BaseModel):
    """One category's model of P(right) and its confident threshold."""

    model_config = ConfigDict(extra="forbid")

    target: float
    rows: int  # verdicts of this category in the data
    right: int  # ... of them right
    mean: list[float] = Field(default_factory=list)  # empty: a constant model (intercept)
    scale: list[float] = Field(default_factory=list)
    coef: list[float] = Field(default_factory=list)
    intercept: float = 0.0
    threshold: float | None = None  # None: never confident
    why_none: str | None = None  # why there is no threshold
    cv_confident: int = 0  # held-out verdicts at or above the threshold
    cv_precision: float | None = None  # ... their precision
    cv_precision_ci: tuple[float, float] | None = None  # Wilson 95 %
    cv_precision_not_sure: float | None = None  # precision of those below the threshold
    cv_coverage: float | None = None  # confident and right / pairs whose label it stands for

    def probability(self, features: np.ndarray) -> np.ndarray:
        """P(right) for an (n, len(FEATURES)) matrix."""
        x = np.asarray(features, dtype=np.float64)
        if not self.coef:
            return np.full(len(x), 1.0 / (1.0 + np.exp(-self.intercept)))
        z = (x - np.asarray(self.mean)) / np.asarray(self.scale)
        logits = np.clip(z @ np.asarray(self.coef) + self.intercept, -30.0, 30.0)
        return np.asarray(1.0 / (1.0 + np.exp(-logits)))


class CardData(BaseModel):
    """What a card was fitted on."""

    model_config = ConfigDict(extra="forbid")

    sha256: str  # of the labelled examples as judged (claims, passages, labels)
    rows: int
    sources: list[str]  # file names, "reviews:<store>", dev set names
    labels: dict[str, int]  # gold label -> count
    created_at: str
    created_by: str


class ConfidenceCard(BaseModel):
    """A fitted confidence for one judge and prompt version."""

    model_config = ConfigDict(extra="forbid")

    kind: str = CARD_KIND
    judge: str  # the judge id it was fitted for (e.g. "llm:local:qwen2.5-1.5b")
    prompt: str | None = None  # the judge's prompt version (None: the judge has none)
    medverify: str = ""  # the version that fitted it
    features: list[str] = Field(default_factory=lambda: list(FEATURES))
    folds: int
    data: CardData
    categories: dict[str, CategoryFit]  # FACT / HALLUCINATION / COVERAGE_GAP
    notes: str = ""

    @property
    def card_id(self) -> str:
        """A short hash of the card's content (what the service reports as live)."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def fits(self, judge_id: str, prompt: str | None) -> str | None:
        """None when the card was fitted for this judge and prompt, else why not."""
        if judge_id != self.judge:
            return f"fitted for judge {self.judge!r}, not {judge_id!r}"
        if prompt != self.prompt:
            return f"fitted for prompt {self.prompt!r}, not {prompt!r}"
        return None

    def summary(self) -> dict[str, object]:
        """What the service and ``calibrate`` print about a card."""
        return {"card_id": self.card_id, "judge": self.judge, "prompt": self.prompt,
                "data_sha256": self.data.sha256, "rows": self.data.rows,
                "created_at": self.data.created_at, "created_by": self.data.created_by,
                "thresholds": {c: f.threshold for c, f in self.categories.items()}}


def card_names() -> list[str]:
    """The names :func:`resolve_card` finds: the user's cards, then the shipped ones."""
    found = {p.stem for d in (home() / "calibrations", SHIPPED_DIR) if d.is_dir()
             for p in d.glob("*.json")}
    return sorted(found)


def shipped_card_for(judge_id: str, prompt: str | None) -> ConfidenceCard | None:
    """The shipped card fitted for exactly this judge and prompt (None if there is none)."""
    if not SHIPPED_DIR.is_dir():
        return None
    for path in sorted(SHIPPED_DIR.glob("*.json")):
        card = load_card(path)
        if card.fits(judge_id, prompt) is None:
            return card
    return None


def is_card_file(path: Path) -> bool:
    """Whether ``path`` holds a confidence card (not a built-in judge calibration)."""
    try:
        head = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(head, dict) and head.get("kind") == CARD_KIND


def resolve_card(value: str | Path | None) -> ConfidenceCard | None:
    """The card ``[judge_settings] calibration`` names: a card file, or a card's name; None
    for no setting or a built-in judge calibration file (the built-in judge reads those).
    ConfigError for a name that is no card."""
    if value is None or str(value) == "":
        return None
    path = Path(value).expanduser()
    if path.is_file():
        return load_card(path) if is_card_file(path) else None
    for folder in (home() / "calibrations", SHIPPED_DIR):
        candidate = folder / f"{value}.json"
        if candidate.is_file():
            return load_card(candidate)
    raise ConfigError(f"[judge_settings] calibration {str(value)!r} is neither a file nor a "
                      f"known card; known cards: {', '.join(card_names()) or 'none'}")


def load_card(path: str | Path) -> ConfidenceCard:
    """The card at ``path`` (ConfigError when unreadable or fitted on other features)."""
    file = Path(path)
    stat = file.stat() if file.is_file() else None
    return _load(str(file), stat.st_mtime_ns if stat else 0)


@lru_cache(maxsize=16)
def _load(path: str, _mtime: int) -> ConfidenceCard:
    try:
        card = ConfidenceCard.model_validate_json(Path(path).read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the confidence card {path}: {exc}") from exc
    if card.kind != CARD_KIND:
        raise ConfigError(f"{path} is not a confidence card (kind {card.kind!r})")
    if tuple(card.features) != FEATURES:
        raise ConfigError(f"the confidence card {path} was fitted on other features; refit it "
                          "with `medverify calibrate`")
    return card
