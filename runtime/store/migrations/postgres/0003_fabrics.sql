-- InfiniBand fabrics declared through the management API (the PostgreSQL
-- twin of sqlite/0003_fabrics.sql).
CREATE TABLE fabrics (
    name        TEXT PRIMARY KEY,
    description TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
