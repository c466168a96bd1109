"""``medverify keys``: the API keys of the HTTP service (``medverify serve``).

Keys live in the run store; each command here is written to the service's audit log (with
no key id: it came from the command line).
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from medverify.cli import main
from medverify.cli._common import config_option, load_config, store_option
from medverify.store.access import AuditLog, KeyInfo, KeyStore, Role
from medverify.store.runs import RunStore

_ROLES = click.Choice([role.value for role in Role])


def _when(info: KeyInfo, field: str) -> str:
    value = getattr(info, field)
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


@main.group()
def keys() -> None:
    """API keys of the HTTP service (stored hashed; a secret is shown once)."""


@keys.command("create")
@click.argument("name")
@click.option("--role", type=_ROLES, default=Role.CLIENT.value, show_default=True,
              help="client: check, audit, factcheck, risk and its own jobs; reviewer: also "
              "the review queue; admin: also keys, the audit log, every job and run.")
@click.option("--json", "as_json", is_flag=True, help="Print the key and secret as JSON.")
@config_option
@store_option
def create(name: str, role: str, as_json: bool, config_path: Path | None,
           store: Path | None) -> None:
    """Create a key named NAME and print its secret (this once)."""
    config = load_config(config_path, store=store)
    with RunStore(config.store_location) as db:
        new = KeyStore(db).create(name, Role(role))
        AuditLog(db).record(None, "keys.create", target=new.key.id, detail="cli")
    if as_json:
        click.echo(new.model_dump_json(indent=2))
        click.echo("The secret will not be shown again: store it now.", err=True)
        return
    click.echo(f"created key {new.key.id} ({new.key.name}, role {new.key.role.value})")
    click.echo(new.secret)
    click.echo("This secret will not be shown again: store it now (it is kept only as a hash).")


@keys.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@config_option
@store_option
def list_keys(as_json: bool, config_path: Path | None, store: Path | None) -> None:
    """List the keys, revoked ones included (never their secrets)."""
    config = load_config(config_path, store=store)
    with RunStore(config.store_location) as db:
        infos = KeyStore(db).list()
        AuditLog(db).record(None, "keys.list", detail="cli")
    if as_json:
        click.echo(json.dumps([i.model_dump(mode="json") for i in infos], indent=2))
        return
    if not infos:
        click.echo("no API keys yet: `medverify keys create NAME` makes one")
        return
    table = Table("key", "name", "role", "created (UTC)", "last used", "revoked")
    for info in infos:
        table.add_row(info.id, info.name, info.role.value, _when(info, "created_at"),
                      _when(info, "last_used_at"), _when(info, "revoked_at"))
    Console().print(table)


@keys.command("revoke")
@click.argument("key_id")
@config_option
@store_option
def revoke(key_id: str, config_path: Path | None, store: Path | None) -> None:
    """Revoke the key KEY_ID: it stops working at once (revoking it again changes nothing)."""
    config = load_config(config_path, store=store)
    with RunStore(config.store_location) as db:
        keystore = KeyStore(db)
        before = keystore.get(key_id)
        info = keystore.revoke(key_id)
        AuditLog(db).record(None, "keys.revoke", target=key_id, detail="cli")
    if before.revoked_at is not None:
        when = _when(info, "revoked_at")
        click.echo(f"key {info.id} ({info.name}) was already revoked at {when} UTC")
    else:
        click.echo(f"revoked key {info.id} ({info.name})")
