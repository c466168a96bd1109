"""An answer made into the claims a flow checks: refuse input that cannot be checked
(:func:`validate_answer`: empty, over ``max_answer_chars``, NUL bytes), decompose it with the
configured decomposer, and cap the claims at ``max_claims`` (:func:`cap_claims`), with the
errors to report for that answer (:func:`decompose_answer`). Every flow (check, audit,
factcheck, the trial study) and the service's routes use these, so an answer is refused and
capped the same way everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from medverify.config import Config
from medverify.errors import InputError, MedverifyError
from medverify.records import Answer, Claim

if TYPE_CHECKING:
    from medverify.decompose import Decomposer


def validate_answer(answer: Answer, max_chars: int) -> None:
    """Refuse input that cannot be checked, with a message the user can act on."""
    if not answer.text.strip():
        raise InputError("the answer is empty: nothing to check")
    if len(answer.text) > max_chars:
        raise InputError(
            f"the answer has {len(answer.text):,} characters, over the limit of {max_chars:,}; "
            "split it, or raise the limit with --max-answer-chars / MEDVERIFY_MAX_ANSWER_CHARS"
        )
    if "\x00" in answer.text:
        raise InputError("the answer contains NUL bytes: is it a binary file?")


async def decompose_answer(answer: Answer, decomposer: Decomposer, config: Config, *,
                           noun: str = "claim", verb: str = "checked",
                           cap_prefix: str = "decompose: ") -> tuple[list[Claim], list[str]]:
    """Validate, decompose and cap at ``config.max_claims``: the claims and the errors to
    report for this answer (never raises for a problem confined to it)."""
    try:
        validate_answer(answer, config.max_answer_chars)
        claims = await decomposer.decompose(answer)
    except MedverifyError as exc:
        return [], [f"decompose: {exc}"]
    errors = [] if claims else [f"decompose: no checkable {noun} found in the answer"]
    claims, cap_error = cap_claims(claims, config.max_claims, noun=noun, verb=verb,
                                   prefix=cap_prefix)
    return claims, errors + cap_error


def cap_claims(claims: list[Claim], cap: int, *, noun: str = "claim", verb: str = "checked",
               prefix: str = "decompose: ") -> tuple[list[Claim], list[str]]:
    """The first ``cap`` claims, and the error that says the rest were dropped."""
    if len(claims) <= cap:
        return claims, []
    return claims[:cap], [f"{prefix}{len(claims)} {noun}s, only the first {cap} were "
                          f"{verb} (max_claims)"]
