-- What each control plane that does not lead reports of the requests it
-- serves, for the leader to count with its own: per model, when it was
-- last asked for, the requests in flight (per replica) and waiting for a
-- replica, and the first requests that found none. One row per control
-- plane (its ha.name), rewritten while it runs; updated_at is microseconds
-- of the database's clock, so the leader ages a row out by that clock.
CREATE TABLE control_plane_demand (
    name       TEXT PRIMARY KEY,
    instance   TEXT NOT NULL,
    value      TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
