-- Run store, version 4: benchmark studies (`medverify bench run`). The study is a row of
-- `runs` (kind 'bench'); each model's reply to each question is one ModelReply record
-- (raw attempts and token counts included), so a study's replies can be re-audited and
-- its report recomputed without calling a model.
CREATE TABLE bench_replies (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    model TEXT NOT NULL,             -- the model's label in the study
    question_id TEXT NOT NULL,
    status TEXT NOT NULL,            -- ReplyStatus: ok | fallback | no_sources | refusal | empty | error
    reply TEXT NOT NULL,             -- JSON ModelReply
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, model, question_id)
);
