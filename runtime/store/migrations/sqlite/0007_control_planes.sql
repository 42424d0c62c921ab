-- The SQLite twin of postgres/0007_control_planes.sql. A SQLite store serves
-- one control plane; the lease is still taken, so the code path is one.
-- leader_leases: the fleet leader lease (holder, fencing token, expiry, in
-- microseconds of the database clock).
CREATE TABLE leader_leases (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    instance    TEXT NOT NULL,
    token       BIGINT NOT NULL,
    agent_addr  TEXT NOT NULL,
    client_addr TEXT NOT NULL,
    manage_addr TEXT NOT NULL,
    acquired_at BIGINT NOT NULL,
    renewed_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);

-- Every control plane that runs on this store, leader or standby, with when
-- it was last seen (for `ctl status`).
CREATE TABLE control_planes (
    name        TEXT PRIMARY KEY,
    instance    TEXT NOT NULL,
    version     TEXT NOT NULL,
    agent_addr  TEXT NOT NULL,
    client_addr TEXT NOT NULL,
    manage_addr TEXT NOT NULL,
    started_at  BIGINT NOT NULL,
    seen_at     BIGINT NOT NULL
);

-- What the leader decided about the fleet and standbys need (the routes,
-- the live replicas), each written under the fencing token of the lease it
-- held.
CREATE TABLE fleet_state (
    key        TEXT PRIMARY KEY,
    token      BIGINT NOT NULL,
    value      TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- Nodes an operator drained: a new leader drains them again when their
-- agents connect.
CREATE TABLE node_drains (
    node       TEXT PRIMARY KEY,
    token      BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
