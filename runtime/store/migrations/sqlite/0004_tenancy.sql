-- Tenancy: projects (the unit of limits, budgets and keys), per-key limits,
-- budgets, users and per-request usage. Money is a float in the operator's
-- own unit; usage rows never hold message content.

CREATE TABLE projects (
    name           TEXT PRIMARY KEY,
    rpm            BIGINT NOT NULL DEFAULT 0,
    tpm            BIGINT NOT NULL DEFAULT 0,
    allowed_models TEXT NOT NULL DEFAULT '[]',
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);

-- Every project a key already names exists, and so does "default".
INSERT INTO projects (name, created_at, updated_at)
    SELECT project, MIN(created_at), MIN(created_at) FROM api_keys GROUP BY project;
INSERT INTO projects (name, created_at, updated_at)
    SELECT 'default', 0, 0 WHERE NOT EXISTS (SELECT 1 FROM projects WHERE name = 'default');

ALTER TABLE api_keys ADD COLUMN rpm BIGINT NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN tpm BIGINT NOT NULL DEFAULT 0;

CREATE TABLE budgets (
    project        TEXT NOT NULL,
    period         TEXT NOT NULL,
    amount         DOUBLE PRECISION NOT NULL,
    on_exhausted   TEXT NOT NULL,
    fallback_model TEXT NOT NULL DEFAULT '',
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL,
    PRIMARY KEY (project, period)
);

CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    email         TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    admin         BIGINT NOT NULL DEFAULT 0,
    created_at    BIGINT NOT NULL
);

CREATE TABLE usage_records (
    id                INTEGER PRIMARY KEY,
    at                BIGINT NOT NULL,
    request_id        TEXT NOT NULL,
    project           TEXT NOT NULL,
    key_id            TEXT NOT NULL,
    model             TEXT NOT NULL,
    replica           TEXT NOT NULL,
    endpoint          TEXT NOT NULL,
    status            BIGINT NOT NULL,
    prompt_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    cost              DOUBLE PRECISION NOT NULL,
    latency_us        BIGINT NOT NULL,
    ttft_us           BIGINT NOT NULL,
    stream            BIGINT NOT NULL
);
CREATE INDEX usage_records_project_at ON usage_records (project, at);
CREATE INDEX usage_records_at ON usage_records (at);
