"""The flow kit: the parts every flow (check, fact-check, audit, bench, trial study) takes
ready-made, declared once.

A part left ``None`` is built from the config, the same way in every flow: the knowledge
base and model through :class:`~medverify.harness.Resources` (closed by the flow that
opened them), the judge through :func:`~medverify.judge.build.create_judge` (the one way,
with its confidence card), the decomposer, embedder and fetcher factory from their
registries and settings. A service worker passes the parts it already holds, so its flows
share one judge, one decomposer and one model; tests and benchmarks pass fakes.
"""

from __future__ import annotations

from dataclasses import dataclass

from medverify.config import Config
from medverify.decompose import DECOMPOSERS, Decomposer
from medverify.executor import Executor
from medverify.harness import Resources
from medverify.judge import Judge
from medverify.judge.build import create_judge
from medverify.kb.embed import Embedder, get_embedder
from medverify.kb.protocol import KBStore
from medverify.llm.facade import Model, UsageLedger
from medverify.sources.factory import FetcherFactory, default_fetcher


@dataclass(frozen=True)
class FlowKit:
    """The parts a flow may be given instead of building them from its config."""

    kb: KBStore | None = None  # the knowledge base (flows that search one)
    model: Model | None = None  # the model for the judge, decomposer and rewriter
    judge: Judge | None = None
    decomposer: Decomposer | None = None
    embedder: Embedder | None = None  # passage selection (audit, fact-check, study)
    fetcher_factory: FetcherFactory | None = None  # fetching cited pages (audit, bench)
    executor: Executor | None = None  # where the audit's answers run (local, Ray)
    record: bool = True  # record the run in the run store

    def open(self, config: Config, *, need_kb: bool = True,
             ledger: UsageLedger | None = None) -> Resources:
        """This kit's KB and model, else the configured ones (opened, and owned, here)."""
        return Resources.open(config, kb=self.kb, model=self.model, ledger=ledger,
                              need_kb=need_kb)

    def judge_for(self, config: Config, model: Model | None) -> Judge:
        return self.judge if self.judge is not None else create_judge(config, model)

    def decomposer_for(self, config: Config, model: Model | None) -> Decomposer:
        if self.decomposer is not None:
            return self.decomposer
        return DECOMPOSERS.create(config.decomposer_name, config, model)

    def embedder_for(self, config: Config) -> Embedder:
        return self.embedder if self.embedder is not None else get_embedder(
            config.kb_settings.embedder)

    def fetcher_for(self, config: Config) -> FetcherFactory:
        return self.fetcher_factory or default_fetcher(config)
