"""The one way every flow builds its judge: the registered judge, wrapped with the confidence
card that ``[judge_settings] calibration`` names (:mod:`medverify.judge.confidence`)."""

from __future__ import annotations

from typing import Any

from medverify.config import Config
from medverify.judge import JUDGES, Judge
from medverify.judge.confidence.card import resolve_card, shipped_card_for
from medverify.judge.confidence.wrap import CardJudge


def create_judge(config: Config, model: Any, name: str | None = None) -> Judge:
    """The judge ``name`` (default: the configured one) made from ``config`` and ``model``,
    wrapped with the confidence card ``[judge_settings] calibration`` names; unset, with the
    card shipped for exactly this judge and prompt (the packaged local models), if any: the
    one way every flow builds its judge."""
    judge = JUDGES.create(name or config.judge_name, config, model)
    setting = config.judge_settings.calibration
    card = (resolve_card(setting) if setting else
            shipped_card_for(str(getattr(judge, "judge_id", judge.name)), judge.prompt_version))
    return judge if card is None else CardJudge(judge, card)
