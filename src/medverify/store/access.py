"""API keys (stored hashed), their roles, the audit log of every write, and the review
UI's browser sessions.

All live in the run store (tables ``api_keys`` and ``audit_log``, migration 0006;
``review_sessions``, migration 0010): :class:`KeyStore` creates, lists, revokes and verifies
keys; :class:`AuditLog` appends and reads the log; :class:`SessionStore` opens, finds and
ends sessions.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from medverify.errors import MedverifyError
from medverify.records import Record
from medverify.store.runs import RunStore
from medverify.store.sql_bounds import sql_bound


class Role(StrEnum):
    """What a key may do; each role may do everything the ones before it may."""

    CLIENT = "client"  # check, audit, factcheck, risk; its own jobs and runs
    REVIEWER = "reviewer"  # the clinician review queue (next issue), and a client's rights
    ADMIN = "admin"  # keys, the audit log, every job and run

    def allows(self, needed: Role) -> bool:
        order = list(Role)
        return order.index(self) >= order.index(needed)


class KeyInfo(Record):
    """An API key as listed (never its secret, which exists only when it is created)."""

    id: str
    name: str
    role: Role
    created_at: datetime
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None


class NewKey(Record):
    """A key just created: ``secret`` is shown this once and stored only as a hash."""

    key: KeyInfo
    secret: str


class AuditEvent(Record):
    """One line of the audit log: who did what, when."""

    id: int
    at: datetime
    key_id: str | None
    action: str
    target: str | None = None
    status: int | None = None
    detail: str | None = None


class KeyNotFound(MedverifyError):
    """No API key has this id (``key_id``)."""

    def __init__(self, message: str, key_id: str = "") -> None:
        super().__init__(message)
        self.key_id = key_id


class LastAdminKey(MedverifyError):
    """Revoking this key would leave no active admin key."""


_PREFIX = "mvk_"
_SECRET = re.compile(r"mvk_([0-9a-f]{12})_([A-Za-z0-9_-]{16,128})")
_TOUCH_EVERY = timedelta(minutes=1)
_KEY_COLUMNS = "id, name, role, created_at, revoked_at, last_used_at"
_EVENT_COLUMNS = "id, at, key_id, action, target, status, detail"


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="seconds")


def _when(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _key(row: tuple) -> KeyInfo:
    key_id, name, role, created_at, revoked_at, last_used_at = row
    return KeyInfo(id=key_id, name=name, role=Role(role), created_at=datetime.fromisoformat(
        created_at), revoked_at=_when(revoked_at), last_used_at=_when(last_used_at))


class KeyStore:
    """API keys in the run store.

    A secret reads ``mvk_<id>_<token>``: ``id`` (12 hex characters) names the row, ``token``
    is 32 random bytes (``secrets.token_urlsafe``). Only the SHA-256 of the whole secret is
    stored. A fast, unsalted hash is adequate here because the secret is not a password: it
    carries 256 random bits, so neither a dictionary nor brute force over the hash is
    feasible, and a slow hash would only make every request slower.
    """

    def __init__(self, runs: RunStore) -> None:
        self._db = runs._db

    def create(self, name: str, role: Role | str = Role.CLIENT) -> NewKey:
        name = name.strip()
        if not name:
            raise MedverifyError("an API key needs a name (who or what uses it)")
        role = Role(role)
        created = _stamp(_now())
        for _ in range(5):  # 48-bit ids: a collision is unlikely, and retried
            key_id = secrets.token_hex(6)
            secret = f"{_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
            try:
                self._db.execute(
                    "INSERT INTO api_keys (id, name, role, secret_sha256, created_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (key_id, name, role.value, _digest(secret), created),
                )
            except self._db.IntegrityError:
                continue
            return NewKey(key=self.get(key_id), secret=secret)
        raise MedverifyError("could not find a free API key id; try again")

    def list(self) -> list[KeyInfo]:
        """Every key, revoked ones included, oldest first."""
        rows = self._db.execute(
            f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at, rowid"
        ).fetchall()
        return [_key(row) for row in rows]

    def get(self, key_id: str) -> KeyInfo:
        row = self._db.execute(
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE id = ?", (key_id,)
        ).fetchone()
        if row is None:
            raise KeyNotFound(
                f"no API key with id {key_id!r}; `medverify keys list` shows the keys",
                key_id=key_id,
            )
        return _key(row)

    def revoke(self, key_id: str, *, keep_an_admin: bool = False) -> KeyInfo:
        """Revoke a key (at once, for every process); revoking it again changes nothing.

        ``keep_an_admin`` (the HTTP API's revoke): :class:`LastAdminKey` instead of revoking
        the last active admin key, which would lock every admin out of the API. The check
        and the revoke are one statement, so two admins revoking each other at once cannot
        both succeed."""
        stamp, guard = _stamp(_now()), ""
        if keep_an_admin:
            guard = (" AND (role <> 'admin' OR revoked_at IS NOT NULL OR EXISTS (SELECT 1 FROM"
                     " api_keys o WHERE o.role = 'admin' AND o.revoked_at IS NULL"
                     " AND o.id <> ?))")
        cursor = self._db.execute(
            f"UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?{guard}",
            (stamp, key_id, key_id) if keep_an_admin else (stamp, key_id),
        )
        if cursor.rowcount == 0:
            self.get(key_id)  # KeyNotFound for an unknown id
            raise LastAdminKey(f"key {key_id} is the last active admin key: revoking it would "
                               "leave no key that can manage keys; create another admin key "
                               "first")
        return self.get(key_id)

    def verify(self, secret: str) -> KeyInfo | None:
        """The key a secret belongs to, or None for a malformed, unknown, wrong or revoked
        one. Records the use in ``last_used_at``, at most once a minute per key."""
        match = _SECRET.fullmatch(secret) if isinstance(secret, str) else None
        if match is None:
            return None
        row = self._db.execute(
            f"SELECT {_KEY_COLUMNS}, secret_sha256 FROM api_keys WHERE id = ?",
            (match.group(1),),
        ).fetchone()
        if row is None or not hmac.compare_digest(row[-1], _digest(secret)):
            return None
        info = _key(row[:-1])
        if info.revoked_at is not None:
            return None
        now = _now()
        if info.last_used_at is None or now - info.last_used_at >= _TOUCH_EVERY:
            stamp = _stamp(now)
            self._db.execute(
                "UPDATE api_keys SET last_used_at = ? WHERE id = ?"
                " AND (last_used_at IS NULL OR last_used_at <= ?)",
                (stamp, info.id, _stamp(now - _TOUCH_EVERY)),
            )
            info = info.model_copy(update={"last_used_at": now})
        return info


class AuditLog:
    """The audit log in the run store: who did what, when (append only)."""

    def __init__(self, runs: RunStore) -> None:
        self._db = runs._db

    def record(
        self,
        key_id: str | None,
        action: str,
        target: str | None = None,
        status: int | None = None,
        detail: str | None = None,
    ) -> AuditEvent:
        at = _now()
        event_id = self._db.insert_id(
            "INSERT INTO audit_log (at, key_id, action, target, status, detail)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (_stamp(at), key_id, action, target, status, detail),
        )
        return AuditEvent(id=event_id, at=at, key_id=key_id, action=action,
                          target=target, status=status, detail=detail)

    def touched(self, key_id: str, target: str) -> bool:
        """Whether key ``key_id`` made a write whose target was ``target`` (e.g. a run)."""
        row = self._db.execute("SELECT 1 FROM audit_log WHERE key_id = ? AND target = ? "
                               "LIMIT 1", (key_id, target)).fetchone()
        return row is not None

    def list(
        self, limit: int = 100, key_id: str | None = None, since_id: int | None = None
    ) -> list[AuditEvent]:
        """The newest ``limit`` events (newest first), of one key when ``key_id`` is given,
        and only those after event ``since_id`` when it is."""
        where, args = [], []
        if key_id is not None:
            where.append("key_id = ?")
            args.append(key_id)
        if since_id is not None:
            where.append("id > ?")
            args.append(since_id)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self._db.execute(
            f"SELECT {_EVENT_COLUMNS} FROM audit_log{clause} ORDER BY id DESC LIMIT ?",
            (*args, sql_bound(limit)),
        ).fetchall()
        return [
            AuditEvent(id=i, at=datetime.fromisoformat(at), key_id=k, action=a, target=t,
                       status=s, detail=d)
            for i, at, k, a, t, s, d in rows
        ]


class Session(Record):
    """A browser session of the review UI: the key that logged in, and the CSRF token every
    form of the session must send back."""

    key: KeyInfo
    csrf_token: str
    created_at: datetime
    expires_at: datetime


SESSION_TTL = timedelta(hours=12)
"""How long a review session lasts from its login (then the reviewer logs in again)."""


class SessionStore:
    """Review UI sessions in the run store.

    A session id is 32 random bytes (``secrets.token_urlsafe``) held by the browser in a
    cookie; only its SHA-256 is stored, so a copy of the store does not hold live sessions.
    :meth:`get` finds nothing for an unknown, expired or logged-out session, nor for one
    whose key has been revoked since it logged in.
    """

    def __init__(self, runs: RunStore, ttl: timedelta = SESSION_TTL) -> None:
        self._db = runs._db
        self.ttl = ttl

    def create(self, key_id: str) -> tuple[str, str]:
        """A new session for key ``key_id``: ``(session_id, csrf_token)``. Also forgets the
        sessions that have expired."""
        now = _now()
        session_id, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        self._db.execute("DELETE FROM review_sessions WHERE expires_at <= ?", (_stamp(now),))
        self._db.execute(
            "INSERT INTO review_sessions (id_sha256, key_id, csrf_token, created_at,"
            " expires_at) VALUES (?, ?, ?, ?, ?)",
            (_digest(session_id), key_id, csrf, _stamp(now), _stamp(now + self.ttl)),
        )
        return session_id, csrf

    def get(self, session_id: str | None) -> Session | None:
        """The live session ``session_id`` names, or None (unknown, expired, logged out, or
        its key revoked)."""
        if not isinstance(session_id, str) or not 16 <= len(session_id) <= 128:
            return None
        row = self._db.execute(
            "SELECT s.csrf_token, s.created_at, s.expires_at, "
            + ", ".join(f"k.{c.strip()}" for c in _KEY_COLUMNS.split(","))
            + " FROM review_sessions s JOIN api_keys k ON k.id = s.key_id"
            " WHERE s.id_sha256 = ?",
            (_digest(session_id),),
        ).fetchone()
        if row is None:
            return None
        csrf, created_at, expires_at = row[:3]
        key = _key(row[3:])
        expires = datetime.fromisoformat(expires_at)
        if key.revoked_at is not None or expires <= _now():
            return None
        return Session(key=key, csrf_token=csrf, created_at=datetime.fromisoformat(created_at),
                       expires_at=expires)

    def delete(self, session_id: str | None) -> bool:
        """End a session (log out); False when there was none."""
        if not isinstance(session_id, str):
            return False
        cursor = self._db.execute("DELETE FROM review_sessions WHERE id_sha256 = ?",
                                  (_digest(session_id),))
        return cursor.rowcount > 0
