-- The master server's registry of games and their mirrors.
-- One file for SQLite and PostgreSQL: portable types only, times as
-- microseconds since the Unix epoch (BIGINT), flags as INTEGER 0/1.
-- Table names carry a master_ prefix so that the master may share a
-- database with the account server. Statements end with a semicolon at the
-- end of a line.

CREATE TABLE master_games (
    id            TEXT PRIMARY KEY,
    owner         TEXT NOT NULL,
    instance      TEXT NOT NULL,
    name          TEXT NOT NULL,
    world         TEXT NOT NULL,
    mode          TEXT NOT NULL,
    players       BIGINT NOT NULL,
    capacity      BIGINT NOT NULL,
    version       BIGINT NOT NULL,
    status_url    TEXT NOT NULL,
    status_key    TEXT NOT NULL,
    heard         INTEGER NOT NULL,
    missed        INTEGER NOT NULL,
    registered_us BIGINT NOT NULL,
    updated_us    BIGINT NOT NULL,
    heard_us      BIGINT NOT NULL
);

CREATE INDEX master_games_by_world_mode ON master_games (world, mode, id);

CREATE TABLE master_mirrors (
    game_id     TEXT NOT NULL REFERENCES master_games (id) ON DELETE CASCADE,
    mirror_id   BIGINT NOT NULL,
    probe_addr  TEXT NOT NULL,
    client_addr TEXT NOT NULL,
    PRIMARY KEY (game_id, mirror_id)
);
