-- Run store, version 6: the HTTP service (`medverify serve`). API keys are stored as the
-- SHA-256 of their secret only (the secret is shown once, when the key is created); the job
-- queue lives here so that queued and interrupted jobs survive a restart and several worker
-- processes sharing this file take each job exactly once; the audit log records every
-- write (and every key command) with who did it. Times are ISO-8601 UTC strings; those of
-- `jobs` have a fixed width (microseconds) so that they order and compare as text.
CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,             -- 12 hex characters, also inside the secret
    name TEXT NOT NULL,
    role TEXT NOT NULL,              -- client | reviewer | admin
    secret_sha256 TEXT NOT NULL,     -- hex SHA-256 of the whole secret
    created_at TEXT NOT NULL,
    revoked_at TEXT,
    last_used_at TEXT                -- updated at most once a minute
);

CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,              -- check | audit | factcheck
    status TEXT NOT NULL,            -- queued | running | done | failed | cancelled
    key_id TEXT,                     -- the API key that submitted it
    created_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT,
    heartbeat_at TEXT,               -- a running job's worker is alive (see recover)
    worker TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    progress_done INTEGER NOT NULL DEFAULT 0,
    progress_total INTEGER NOT NULL DEFAULT 0,
    run_id TEXT,                     -- the run it records its answers in
    error TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    request TEXT NOT NULL,           -- JSON, the request body
    result TEXT                      -- JSON, when done
);
CREATE INDEX jobs_by_status ON jobs (status, created_at);
CREATE INDEX jobs_by_key ON jobs (key_id, created_at);

CREATE TABLE audit_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    key_id TEXT,                     -- NULL for the command line
    action TEXT NOT NULL,            -- e.g. keys.create, jobs.submit
    target TEXT,                     -- what it acted on: a key, job or run id
    status INTEGER,                  -- the HTTP status of the response
    detail TEXT
);
CREATE INDEX audit_log_by_key ON audit_log (key_id, id);
