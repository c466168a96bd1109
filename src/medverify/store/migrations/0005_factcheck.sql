-- Run store, version 5: atomic fact-checking and correction (`medverify factcheck`). The
-- run is a row of `runs` (kind 'factcheck'); each checked answer is one FactCheckReport
-- (facts, every round's verdict and rewrite with raw outputs, answer versions, tokens), so
-- the report and its evaluation can be recomputed without calling a model.
CREATE TABLE factchecks (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,       -- the answer's position in the run's input
    answer_id TEXT NOT NULL,
    report TEXT NOT NULL,            -- JSON FactCheckReport
    n_facts INTEGER NOT NULL DEFAULT 0,
    error TEXT,                      -- the answer's errors joined, NULL when none
    PRIMARY KEY (run_id, position)
);
