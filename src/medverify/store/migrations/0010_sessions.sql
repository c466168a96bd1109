-- Run store, version 10: browser sessions of the review UI (`/review`, docs/review.md). A
-- reviewer logs in with their API key once; the browser then holds only a random session id
-- in an HttpOnly cookie, stored here as its SHA-256 (like the keys' secrets). Each session
-- has its own CSRF token, which every form of the UI must send back. A session ends when it
-- expires, when the reviewer logs out (its row is deleted), or at once when its key is
-- revoked. Times are ISO-8601 UTC strings.
CREATE TABLE review_sessions (
    id_sha256 TEXT PRIMARY KEY,      -- hex SHA-256 of the session id in the cookie
    key_id TEXT NOT NULL REFERENCES api_keys (id),
    csrf_token TEXT NOT NULL,        -- sent back in a hidden field of every form
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
CREATE INDEX review_sessions_by_key ON review_sessions (key_id);
