-- When each API key was last used (to the minute: kept in memory and written once a minute and at
-- a stop), so an operator rotating keys can see the old one is no longer in use before revoking it.
ALTER TABLE api_keys ADD COLUMN last_used_at INTEGER;
