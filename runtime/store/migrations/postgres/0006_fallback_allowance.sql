-- What a budget's fallback model may spend in a period once the budget
-- itself is spent, in the budget's unit: the project's spend stays within
-- amount + fallback_allowance. 0 (every budget set before this column)
-- lets only a free fallback model serve.
ALTER TABLE budgets ADD COLUMN fallback_allowance DOUBLE PRECISION NOT NULL DEFAULT 0;
