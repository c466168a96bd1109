-- Run store, version 12: operating the service (docs/operations.md). The request a run was
-- made for: the service's request id (X-Request-ID, or one it made up), also on the jobs a
-- request queued, so that a job's run carries the id of the request that submitted it (NULL:
-- runs of the command line, and those recorded before version 12). Each claim's outcome as
-- plain columns, so the drift report (`medverify ops report`, the /metrics drift gauges)
-- counts them per day in SQL: its final category (a reviewed claim: the reviewer's label),
-- its arbitration decision (NULL: none) and whether its verdict is confident (1 sure, 0 not
-- sure, NULL not assessed). NULL category: a claim recorded before version 12 (read from its
-- JSON instead).
ALTER TABLE runs ADD COLUMN request_id TEXT;
ALTER TABLE jobs ADD COLUMN request_id TEXT;
ALTER TABLE claims ADD COLUMN category TEXT;
ALTER TABLE claims ADD COLUMN decision TEXT;
ALTER TABLE claims ADD COLUMN confident INTEGER;
CREATE INDEX runs_by_request ON runs (request_id);
CREATE INDEX runs_by_kind ON runs (kind, created_at);
