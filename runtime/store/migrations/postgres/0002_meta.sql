-- Small facts the control plane keeps about itself between runs (the
-- PostgreSQL twin of sqlite/0002_meta.sql).
CREATE TABLE meta (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
