-- The SQLite twin of postgres/0012_thread_revision_default.sql. SQLite
-- cannot change a column's default in place, and a SQLite store serves
-- one control plane (an older release never writes it after a newer one
-- migrated, so no row takes the default 0); rows left at 0 become 1, and
-- PutThread takes a live row at 0 as one it may write over.
UPDATE threads SET revision = 1 WHERE revision = 0;
