-- Admin tokens issued by a login (the PostgreSQL twin of
-- sqlite/0005_login_tokens.sql): they belong to a user and expire.
ALTER TABLE admin_tokens ADD COLUMN user_id TEXT;
ALTER TABLE admin_tokens ADD COLUMN expires_at BIGINT;
CREATE INDEX admin_tokens_user ON admin_tokens (user_id);
