-- A control plane of the release before 0010 that keeps running while
-- a newer one migrated (a rolling upgrade) inserts threads without
-- naming revision: they took the default 0, which reads as "no thread",
-- so a newer release's compare-and-set never found them. New rows now
-- take 1; rows left at 0 become 1. (PutThread also takes a live row at
-- 0 as one it may write over: see sql_content.go.)
ALTER TABLE threads ALTER COLUMN revision SET DEFAULT 1;
UPDATE threads SET revision = 1 WHERE revision = 0;
