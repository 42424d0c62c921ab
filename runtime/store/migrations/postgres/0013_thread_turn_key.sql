-- A thread keeps the idempotency key (a hash of the client's
-- Idempotency-Key header) of the request that stored its last turn, so
-- that the same request sent again (a client's retry after a timeout)
-- replaces that turn's answer rather than storing the turn twice. ''
-- when that request sent none, as for every thread written before.
ALTER TABLE threads ADD COLUMN turn_key TEXT NOT NULL DEFAULT '';
