-- Run store, version 3: stage facts of each checked answer (Report.notes, e.g. the cascade
-- judge's saved model calls), so a rebuilt report carries them too.
ALTER TABLE answers ADD COLUMN notes TEXT NOT NULL DEFAULT '{}';
