-- Accounts, sessions, characters and coordinator leases.
-- One file for SQLite and PostgreSQL: portable types only, times as
-- microseconds since the Unix epoch (BIGINT), flags as INTEGER 0/1.
-- Statements end with a semicolon at the end of a line.

CREATE TABLE accounts (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    name_key      TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    disabled      INTEGER NOT NULL DEFAULT 0,
    created_us    BIGINT NOT NULL,
    updated_us    BIGINT NOT NULL
);

CREATE TABLE sessions (
    id           TEXT PRIMARY KEY,
    account_id   TEXT NOT NULL REFERENCES accounts (id),
    peer_id      TEXT NOT NULL,
    refresh_hash TEXT NOT NULL UNIQUE,
    source       TEXT NOT NULL,
    created_us   BIGINT NOT NULL,
    refreshed_us BIGINT NOT NULL,
    expires_us   BIGINT NOT NULL,
    revoked_us   BIGINT NOT NULL DEFAULT 0
);

CREATE INDEX sessions_by_account ON sessions (account_id);

CREATE TABLE characters (
    account_id TEXT PRIMARY KEY REFERENCES accounts (id),
    region     TEXT NOT NULL,
    x          BIGINT NOT NULL,
    y          BIGINT NOT NULL,
    health     BIGINT NOT NULL,
    score      BIGINT NOT NULL,
    experience BIGINT NOT NULL,
    version    BIGINT NOT NULL,
    saved_us   BIGINT NOT NULL
);

CREATE TABLE inventory (
    account_id TEXT NOT NULL REFERENCES characters (account_id),
    kind       TEXT NOT NULL,
    count      BIGINT NOT NULL CHECK (count > 0),
    PRIMARY KEY (account_id, kind)
);

CREATE TABLE leases (
    region     TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    lease_id   BIGINT NOT NULL,
    granted_us BIGINT NOT NULL,
    expires_us BIGINT NOT NULL
);
