"""Exceptions. Every error a user can see says what went wrong and what to do."""

from __future__ import annotations


class MedverifyError(Exception):
    """Base class: a problem the user can act on (bad input, missing KB, config)."""


class ConfigError(MedverifyError):
    """Invalid configuration or model spec."""


class InputError(MedverifyError):
    """Input that cannot be processed (empty, binary, undecodable, too large)."""


class KBError(MedverifyError):
    """Knowledge base missing, corrupt, or built with another embedder."""


class MissingDependencyError(ConfigError):
    """An optional dependency is missing or broken. Every "pip install ..." advice goes
    through this class, so the message always ends with the command that fixes it.

    ``extra`` names medverify's optional extra (``pip install 'medverify[extra]'``);
    ``command`` replaces the advice (``pip install --force-reinstall X``, several part
    packages); ``problem`` replaces the first half of the message (default: ``PACKAGE is
    required for NEEDED_FOR``). A :class:`ConfigError`: the caller's next move is to change
    the installation, as with any other setting (the service answers 409)."""

    def __init__(self, package: str, extra: str | None = None, *,
                 needed_for: str = "this feature", command: str | None = None,
                 problem: str | None = None) -> None:
        self.package = package
        self.command = command or (
            f"pip install 'medverify[{extra}]'" if extra else f"pip install {package}")
        what = problem or f"{package} is required for {needed_for}"
        super().__init__(f"{what}: run `{self.command}`")


class ProviderError(MedverifyError):
    """A model provider call failed.

    ``retryable`` marks 429, 5xx, timeouts and connection errors; the model facade
    retries those with backoff and raises the last one when retries run out.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after


class ParseError(MedverifyError):
    """Model output that does not match the expected format (the raw text is kept)."""

    def __init__(self, message: str, raw: str | None = None) -> None:
        super().__init__(message)
        self.raw = raw
