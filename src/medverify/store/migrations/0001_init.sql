-- Run store, version 1: runs and the records they produced.
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,            -- running | done | error | interrupted
    created_at TEXT NOT NULL,
    finished_at TEXT,
    medverify_version TEXT NOT NULL,
    config TEXT NOT NULL,            -- JSON
    models TEXT NOT NULL,            -- JSON {role: model spec / id}
    prompt_versions TEXT NOT NULL,   -- JSON {stage: prompt id}
    kb_snapshot TEXT,
    usage TEXT NOT NULL DEFAULT '{}',-- JSON {stage: Usage}
    error TEXT
);

CREATE TABLE answers (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    answer_id TEXT NOT NULL,
    answer TEXT NOT NULL,            -- JSON Answer
    status TEXT NOT NULL,            -- done | error
    error TEXT,
    PRIMARY KEY (run_id, position)
);

CREATE TABLE claims (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,       -- answer position in the run
    claim_id TEXT NOT NULL,
    claim TEXT NOT NULL,             -- JSON Claim
    passages TEXT NOT NULL,          -- JSON [Passage] retrieved for it
    verdict TEXT,                    -- JSON Verdict (raw judge output included), NULL if never judged
    error TEXT,
    PRIMARY KEY (run_id, position, claim_id)
);

CREATE INDEX runs_created ON runs(created_at);
