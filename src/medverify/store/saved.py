"""What the run store needs of a flow's record to save it: the store saves and reads any
pydantic record as JSON and knows no flow's record types (the flows sit above it; they read
their records back with :meth:`RunStore.records <medverify.store.runs.RunStore.records>` and
their own type)."""

from __future__ import annotations

from collections.abc import Sequence, Sized
from datetime import datetime
from enum import Enum
from typing import Protocol

from medverify.records import Answer


class AuditRecord(Protocol):
    """An audited answer (``medverify.audit.records.AnswerAudit``)."""

    @property
    def answer(self) -> Answer: ...

    @property
    def claims(self) -> Sized: ...

    @property
    def errors(self) -> Sequence[str]: ...

    def model_dump_json(self) -> str: ...


class BenchReplyRecord(Protocol):
    """One model's reply to one question (``medverify.bench.records.ModelReply``)."""

    @property
    def model(self) -> str: ...

    @property
    def question_id(self) -> str: ...

    @property
    def status(self) -> Enum: ...

    @property
    def created_at(self) -> datetime: ...

    def model_dump_json(self) -> str: ...


class FactCheckRecord(Protocol):
    """One fact-checked answer (``medverify.factcheck.records.FactCheckReport``)."""

    @property
    def facts(self) -> Sized: ...

    @property
    def errors(self) -> Sequence[str]: ...

    def model_dump_json(self) -> str: ...
