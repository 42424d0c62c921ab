-- A thread's revision changes with every write (a random positive
-- number), so a turn that ends after another turn of the same thread was
-- stored appends to what that turn stored instead of replacing it
-- (compare-and-set on revision). Rows written before get revision 1; 0
-- means no thread.
ALTER TABLE threads ADD COLUMN revision BIGINT NOT NULL DEFAULT 0;
UPDATE threads SET revision = 1;
