-- Run store, version 2: citation audits (`medverify audit`). The run itself is a row of
-- `runs` (kind 'audit'); each audited answer is one AnswerAudit record, from which the
-- summary metrics can be recomputed without a model call.
CREATE TABLE audits (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    answer_id TEXT NOT NULL,
    position INTEGER NOT NULL,       -- the answer's position in the run's input
    audit TEXT NOT NULL,             -- JSON AnswerAudit (verdicts and raw judge output included)
    n_claims INTEGER NOT NULL DEFAULT 0,
    error TEXT,                      -- the answer's errors joined, NULL when none
    PRIMARY KEY (run_id, answer_id)
);

CREATE INDEX audits_position ON audits(run_id, position);
