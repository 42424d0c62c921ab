-- Limits and budgets shared by control planes on one store. A control plane
-- leases a slice of a budget or of a per-minute limit (the subject) and
-- admits from it in memory. granted is what the holder was given over the
-- slice's life, spent what usage rows written for it have charged (in the
-- same transaction as the rows), so granted - spent is what the holder may
-- still spend. A slice counts against its subject's limit until expires_at
-- (microseconds of the database's clock); then its unspent part returns.
CREATE TABLE quota_slices (
    subject    TEXT NOT NULL,
    holder     TEXT NOT NULL,
    granted    DOUBLE PRECISION NOT NULL,
    spent      DOUBLE PRECISION NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (subject, holder)
);
