-- Dashboard sessions, so that signing out ends a session on the server (the cookie alone stayed
-- valid until it expired) and sessions survive a restart. `id` is the SHA-256 (hex) of the random
-- part of the cookie; the cookie itself is never stored. Rows past expires_at are swept at sign-in.
CREATE TABLE dashboard_sessions (
  id TEXT PRIMARY KEY,
  expires_at INTEGER NOT NULL
) WITHOUT ROWID;
