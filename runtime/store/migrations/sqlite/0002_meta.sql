-- Small facts the control plane keeps about itself between runs, such as
-- which replicas were live when it last ran (a hint for how long to wait for
-- agents after a restart; the fleet itself is rebuilt from agent reports).
CREATE TABLE meta (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
