"""``medverify serve``: run the HTTP service (uvicorn; the app is medverify.service.app)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from medverify.cli import main
from medverify.cli._common import config_option, load_config, store_option
from medverify.cli._names import JUDGES, RegistryChoice
from medverify.config import ServiceSettings
from medverify.connections import display
from medverify.errors import ConfigError, MissingDependencyError
from medverify.store.runs import RunStore


@main.command()
@click.option("--kb", type=click.Path(path_type=Path, file_okay=False),
              help="Knowledge base directory (medverify kb ingest).")
@store_option
@click.option("--host", help="Address to listen on (default [service] host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(1, 65535), help="Port (default 8765).")
@click.option("--workers", type=click.IntRange(1, 64),
              help="Worker processes; each loads the KB and models once (default 1).")
@click.option("-m", "--model", help="Model spec for the LLM judge (default: built-in judge).")
@click.option("--judge", type=RegistryChoice(JUDGES),
              help="Judge (default: llm with --model, else builtin).")
@config_option
def serve(kb: Path | None, store: Path | None, host: str | None, port: int | None,
          workers: int | None, model: str | None, judge: str | None,
          config_path: Path | None) -> None:
    """Run the HTTP service: POST /v1/check and friends (docs/service.md, docs/api.md).

    Every request but /healthz and /readyz needs a key: create one first with
    `medverify keys create NAME`. Stop with Ctrl-C or SIGTERM: running jobs get
    [service] shutdown_grace_s to finish, then go back to the queue. Metrics and log
    lines: [service] metrics, metrics_port, log_level, log_format (docs/operations.md)."""
    try:
        import uvicorn

        from medverify.service.app import CONFIG_ENV
        from medverify.service.metrics import metrics_for_serve
    except ImportError as exc:
        raise MissingDependencyError("fastapi", "serve", problem=(
            f"the service needs FastAPI and uvicorn ({exc})")) from exc

    service = {k: v for k, v in {"host": host, "port": port, "workers": workers}.items()
               if v is not None}
    config = load_config(config_path, kb=kb, store=store, model=model, judge=judge)
    config = config.model_copy(update={"service": config.service.model_copy(update=service)})
    if config.kb is None and config.kb_settings.location is None:
        raise ConfigError("no knowledge base: pass --kb DIR (build one with "
                          "`medverify kb ingest PATH --kb DIR`), or set [kb_settings] "
                          "location to a postgresql:// KB")
    RunStore(config.store_location).close()  # created and migrated once, before the workers
    os.environ[CONFIG_ENV] = json.dumps(config.model_dump(mode="json"))
    metrics_server = metrics_for_serve(config)  # several workers: their counts summed
    settings = config.service
    click.echo(f"medverify serving on http://{settings.host}:{settings.port} "
               f"(store {display(config.store_location)}, KB {config.kb}, "
               f"{settings.workers} worker(s)); OpenAPI page: /docs; {_metrics_at(settings)}",
               err=True)
    uvicorn.run("medverify.service.app:app_from_env", factory=True, host=settings.host,
                port=settings.port, workers=settings.workers, log_level="warning",
                timeout_graceful_shutdown=int(settings.shutdown_grace_s) + 10)
    if metrics_server is not None:
        metrics_server.shutdown()


def _metrics_at(settings: ServiceSettings) -> str:
    if not settings.metrics:
        return "metrics off"
    if settings.metrics_port is None:
        return "metrics: /metrics (admin key)"
    return f"metrics: http://{settings.metrics_host}:{settings.metrics_port}/metrics (no key)"
