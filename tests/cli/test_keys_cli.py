"""``medverify keys``: create, list and revoke the service's API keys."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from medverify.cli import main
from medverify.store.access import AuditLog, KeyStore, Role
from medverify.store.runs import RunStore


def _run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_create_prints_the_secret_once_and_it_verifies(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    result = _run("keys", "create", "ci bot", "--role", "reviewer", "--store", str(db))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    secret = next(line for line in lines if line.startswith("mvk_"))
    assert "will not be shown again" in result.stdout
    with RunStore(db) as runs:
        info = KeyStore(runs).verify(secret)
        assert info is not None and info.name == "ci bot" and info.role is Role.REVIEWER
        [event] = AuditLog(runs).list()
    assert (event.key_id, event.action, event.target, event.detail) == (
        None, "keys.create", info.id, "cli")
    listed = _run("keys", "list", "--store", str(db))
    assert listed.exit_code == 0 and info.id in listed.stdout and secret not in listed.stdout


def test_create_json_and_list_json(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    result = _run("keys", "create", "a", "--json", "--store", str(db))
    assert result.exit_code == 0
    created = json.loads(result.stdout)
    assert created["key"]["role"] == "client" and created["secret"].startswith("mvk_")
    assert "will not be shown again" in result.stderr
    _run("keys", "create", "b", "--role", "admin", "--store", str(db))
    listed = json.loads(_run("keys", "list", "--json", "--store", str(db)).stdout)
    assert [(k["name"], k["role"]) for k in listed] == [("a", "client"), ("b", "admin")]
    assert all("secret" not in k and "secret_sha256" not in k for k in listed)
    assert created["key"]["id"] == listed[0]["id"]


def test_revoke_then_revoke_again(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    created = json.loads(_run("keys", "create", "a", "--json", "--store", str(db)).stdout)
    key_id = created["key"]["id"]
    result = _run("keys", "revoke", key_id, "--store", str(db))
    assert result.exit_code == 0 and f"revoked key {key_id}" in result.stdout
    again = _run("keys", "revoke", key_id, "--store", str(db))
    assert again.exit_code == 0 and "already revoked" in again.stdout
    with RunStore(db) as runs:
        assert KeyStore(runs).verify(created["secret"]) is None
        actions = [(e.action, e.target) for e in AuditLog(runs).list()]
    assert actions == [("keys.revoke", key_id), ("keys.revoke", key_id),
                       ("keys.create", key_id)]
    listed = json.loads(_run("keys", "list", "--json", "--store", str(db)).stdout)
    assert listed[0]["revoked_at"] is not None


def test_an_unknown_key_exits_2_with_a_message(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    result = CliRunner().invoke(main, ["keys", "revoke", "0123456789ab", "--store", str(db)])
    assert result.exit_code == 2
    assert "no API key with id '0123456789ab'" in result.stderr
    assert "medverify keys list" in result.stderr


def test_an_unknown_role_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["keys", "create", "a", "--role", "root", "--store", str(tmp_path / "r.db")])
    assert result.exit_code == 2 and "root" in result.stderr


def test_list_without_keys_and_the_default_store(tmp_path: Path) -> None:
    empty = _run("keys", "list")  # $MEDVERIFY_HOME/runs.db (set by conftest)
    assert empty.exit_code == 0 and "no API keys yet" in empty.stdout
    _run("keys", "create", "home")
    assert "home" in _run("keys", "list").stdout
