-- Run store, version 8: each claim's hallucination risk (the risk stage's probability; a
-- rebuilt report lost it before) and its arbitration decision (JSON Arbitration: decision,
-- rule, policy id, inputs), so that `runs show` and the review queue give back the decisions
-- the check made. Both NULL for claims recorded before version 8 (arbitration None).
ALTER TABLE claims ADD COLUMN hallucination_risk REAL;
ALTER TABLE claims ADD COLUMN arbitration TEXT;
