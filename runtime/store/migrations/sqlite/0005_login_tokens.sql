-- Admin tokens issued by a login (`llmgw ctl login`): they belong to a user
-- and expire. Tokens made on the control-plane host (`llmgw keys
-- admin-token`) keep both columns NULL: nobody's, never expiring.
ALTER TABLE admin_tokens ADD COLUMN user_id TEXT;
ALTER TABLE admin_tokens ADD COLUMN expires_at BIGINT;
CREATE INDEX admin_tokens_user ON admin_tokens (user_id);
