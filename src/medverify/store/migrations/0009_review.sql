-- Run store, version 9: the clinician review queue (store/review.py, docs/review.md).
-- Escalated claims become review items; reviewers label them (one label, or two and an
-- adjudication when they disagree); a settled correction with a source can be added to the
-- knowledge base, and every such change is recorded so that it can be reverted. Times are
-- ISO-8601 UTC strings of fixed width (microseconds), so that they order as text.
CREATE TABLE review_items (
    id TEXT PRIMARY KEY,             -- "rv-" + hash of run id, answer id and claim id
    run_id TEXT,                     -- the check run it came from (NULL: not recorded)
    answer_id TEXT NOT NULL,
    claim_id TEXT NOT NULL,
    topic TEXT,
    category TEXT NOT NULL,          -- the KB judge's category
    priority REAL NOT NULL,          -- higher first
    status TEXT NOT NULL,            -- open | needs_second | adjudication | closed
    assignee TEXT,                   -- a reviewer's key id
    labels_needed INTEGER NOT NULL,  -- 1, or 2 (two reviewers, adjudication on disagreement)
    final_label TEXT,                -- set when closed
    created_at TEXT NOT NULL,
    closed_at TEXT,
    item TEXT NOT NULL               -- JSON ReviewItem as added (no labels; status fields
                                     -- are the columns above)
);
CREATE INDEX review_items_queue ON review_items (status, priority DESC, created_at);
CREATE INDEX review_items_by_topic ON review_items (topic, status);
CREATE INDEX review_items_by_assignee ON review_items (assignee, status);
CREATE INDEX review_items_by_closed ON review_items (closed_at);

CREATE TABLE review_labels (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    item_id TEXT NOT NULL REFERENCES review_items (id),
    reviewer TEXT NOT NULL,          -- the reviewer's key id (or name, for imported labels)
    role TEXT NOT NULL,              -- first | second | adjudication
    label TEXT NOT NULL,             -- FACT | HALLUCINATION | JUDGMENT_ERROR | COVERAGE_GAP |
                                     -- CANNOT_TELL
    correction TEXT,
    source_url TEXT,
    source_passage_id TEXT,
    note TEXT,
    created_at TEXT NOT NULL,
    UNIQUE (item_id, reviewer),      -- one label per reviewer and item
    UNIQUE (item_id, role)           -- one label per slot
);
CREATE INDEX review_labels_by_time ON review_labels (created_at);

CREATE TABLE kb_changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    item_id TEXT NOT NULL REFERENCES review_items (id),
    label_id INTEGER NOT NULL REFERENCES review_labels (id),
    doc_id TEXT NOT NULL,            -- the KB document added ("review-<item id>")
    kb_path TEXT NOT NULL,
    reviewer TEXT NOT NULL,
    text TEXT NOT NULL,
    source_url TEXT,
    created_at TEXT NOT NULL,
    reverted_at TEXT
);
CREATE INDEX kb_changes_by_item ON kb_changes (item_id);
CREATE INDEX kb_changes_by_time ON kb_changes (created_at);
