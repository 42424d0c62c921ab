-- Initial schema, the PostgreSQL twin of sqlite/0001_initial.sql. Times are
-- BIGINT microseconds since the Unix epoch, UTC. Secrets are stored only as
-- SHA-256 hex hashes.

CREATE TABLE models (
	name       TEXT PRIMARY KEY,
	spec       BYTEA NOT NULL,
	revision   BIGINT NOT NULL,
	created_at BIGINT NOT NULL,
	updated_at BIGINT NOT NULL
);

-- project is plain text for now; the tenancy work adds a projects table.
CREATE TABLE api_keys (
	id           TEXT PRIMARY KEY,
	name         TEXT NOT NULL,
	prefix       TEXT NOT NULL,
	hash         TEXT NOT NULL UNIQUE,
	project      TEXT NOT NULL DEFAULT 'default',
	created_at   BIGINT NOT NULL,
	expires_at   BIGINT,
	last_used_at BIGINT,
	revoked_at   BIGINT
);
CREATE INDEX api_keys_project ON api_keys (project);

CREATE TABLE admin_tokens (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	hash       TEXT NOT NULL UNIQUE,
	created_at BIGINT NOT NULL,
	revoked_at BIGINT
);

CREATE TABLE nodes (
	name        TEXT PRIMARY KEY,
	declaration BYTEA NOT NULL,
	revision    BIGINT NOT NULL,
	created_at  BIGINT NOT NULL,
	updated_at  BIGINT NOT NULL
);

-- A revocation outlives the node's declaration: a destroyed node's
-- certificate must stay refused.
CREATE TABLE node_revocations (
	name       TEXT PRIMARY KEY,
	revoked_at BIGINT NOT NULL
);
