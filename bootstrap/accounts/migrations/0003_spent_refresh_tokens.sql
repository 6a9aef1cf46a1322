-- Refresh tokens already exchanged, remembered while their session lasts:
-- a second use of one means it was copied, and ends the session (the
-- thief's tokens and the owner's die together; the owner logs in again).
-- Sessions are looked up by expiry for the cleanup of ended ones.

CREATE TABLE spent_refresh_tokens (
    refresh_hash TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL,
    spent_us     BIGINT NOT NULL
);

CREATE INDEX spent_refresh_by_session ON spent_refresh_tokens (session_id);

CREATE INDEX sessions_by_expiry ON sessions (expires_us);
