-- Run store, version 7: the process running a run ("host:pid"), so that a run whose process
-- was killed (left "running" for ever) can be told from one that is still going, and the
-- service can record it as interrupted when it takes over the dead worker's jobs.
ALTER TABLE runs ADD COLUMN process TEXT;
