"""The stores take any LIMIT/OFFSET a caller passes (a Python int past 64 bits overflowed in
SQLite: a 500 from ``GET /v1/review/items?offset=2**63``), and the run store's file is
private (0600 in new 0700 folders, its WAL and SHM files too); and no shipped artefact under
``src/medverify/data`` names an absolute path of the machine it was made on."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from medverify.store.access import AuditLog, KeyNotFound, KeyStore, LastAdminKey, Role
from medverify.store.jobs import JobStore
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore
from medverify.store.sql_bounds import SQL_INT_MAX, sql_bound

DATA = Path(__file__).resolve().parents[2] / "src" / "medverify" / "data"
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:home|work|tmp|Users|root|mnt|scratch|private/var)/")


def test_huge_limits_and_offsets_answer_nothing_instead_of_overflowing(
        store_location: Path | str) -> None:
    assert (sql_bound(None), sql_bound(-5), sql_bound(2**80)) == (SQL_INT_MAX, 0, SQL_INT_MAX)
    with RunStore(store_location) as runs:
        review = ReviewStore(runs)
        assert review.list(offset=2**63) == []
        assert review.list(limit=2**70, offset=2**64) == []
        assert JobStore(runs).list(limit=2**64) == []
        assert AuditLog(runs).list(limit=2**64) == []
        assert runs.list_runs(limit=2**64) == []


def test_the_last_active_admin_key_is_kept_when_asked(store_location: Path | str) -> None:
    """The HTTP API's revoke (``keep_an_admin``) never leaves no active admin key; the
    command line's (without it) still revokes any key."""
    with RunStore(store_location) as runs:
        keys = KeyStore(runs)
        first = keys.create("first", Role.ADMIN).key.id
        second = keys.create("second", Role.ADMIN).key.id
        client = keys.create("client", Role.CLIENT).key.id
        assert keys.revoke(first, keep_an_admin=True).revoked_at is not None
        assert keys.revoke(first, keep_an_admin=True).revoked_at is not None  # again: same
        with pytest.raises(LastAdminKey, match="last active admin key"):
            keys.revoke(second, keep_an_admin=True)
        assert keys.get(second).revoked_at is None
        assert keys.revoke(client, keep_an_admin=True).revoked_at is not None
        with pytest.raises(KeyNotFound):
            keys.revoke("000000000000", keep_an_admin=True)
        assert keys.revoke(second).revoked_at is not None


def test_a_new_run_store_is_private_and_an_old_folder_keeps_its_mode(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    path = tmp_path / "a" / "b" / "runs.db"
    with RunStore(path) as runs:
        AuditLog(runs).record(None, "POST /x", status=200)  # a write: WAL and SHM exist
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        assert all(f.exists() for f in files)
        assert [stat.S_IMODE(f.stat().st_mode) for f in files] == [0o600] * 3
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755  # not ours to change


def test_no_shipped_artefact_names_an_absolute_machine_path() -> None:
    found = []
    for path in sorted(p for p in DATA.rglob("*") if p.is_file()):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            text = path.read_bytes().decode("latin-1")
        found += [f"{path.relative_to(DATA)}: {m.group(0)}" for m in MACHINE_PATH.finditer(text)]
    assert not found, found
    card = json.loads((DATA / "risk_classifiers" / "kqa-ensemble" / "card.json").read_text())
    assert "--work ens/kqa" in json.dumps(card)
