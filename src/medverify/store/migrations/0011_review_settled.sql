-- Run store, version 11: reviewed means settled (docs/review.md). A claim checked again
-- that matches a closed review item (same normalised text, or a near-duplicate) in the same
-- knowledge-base lineage gets the reviewer's label instead of the judge's category. Each
-- item now records the claim's normalised text (lower case, words only, one space) and
-- the lineage of the KB it was checked against (KnowledgeBase.lineage). NULL for items
-- added before version 11: they settle nothing (their KB is not known). A run records the
-- lineage of the KB it checked against too (NULL for runs before version 11).
ALTER TABLE review_items ADD COLUMN claim_key TEXT;
ALTER TABLE review_items ADD COLUMN kb_lineage TEXT;
CREATE INDEX review_items_settled ON review_items (kb_lineage, status, closed_at);
CREATE INDEX review_items_by_claim ON review_items (kb_lineage, claim_key, status);
CREATE INDEX kb_changes_by_revert ON kb_changes (reverted_at);
ALTER TABLE runs ADD COLUMN kb_lineage TEXT;
