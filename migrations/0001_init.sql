-- Foundation: system settings, workspaces, API keys, audit log, contacts, consent ledger, suppressions.
-- Times are integer milliseconds since the Unix epoch (UTC); the API formats them as ISO-8601.

CREATE TABLE system_settings (
  name  TEXT PRIMARY KEY,
  value TEXT NOT NULL
) STRICT;

CREATE TABLE workspaces (
  id         TEXT PRIMARY KEY,
  name       TEXT NOT NULL,
  slug       TEXT NOT NULL UNIQUE,
  status     TEXT NOT NULL CHECK (status IN ('active', 'inactive')),
  settings   TEXT NOT NULL,            -- JSON: sending_policy, message_allowance, media
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) STRICT;

CREATE TABLE api_keys (
  id           TEXT PRIMARY KEY,
  workspace_id TEXT NOT NULL REFERENCES workspaces(id),
  key_id       TEXT NOT NULL UNIQUE,   -- the public part after cap_
  secret_hash  BLOB NOT NULL,          -- SHA-256 of the 48-character secret
  name         TEXT NOT NULL,
  scopes       TEXT NOT NULL,          -- JSON array, stamped at issuance
  status       TEXT NOT NULL CHECK (status IN ('active', 'revoked')),
  created_at   INTEGER NOT NULL,
  expires_at   INTEGER,
  revoked_at   INTEGER
) STRICT;
CREATE INDEX api_keys_workspace ON api_keys (workspace_id, created_at);

CREATE TABLE audit_log (
  id           INTEGER PRIMARY KEY,
  workspace_id TEXT NOT NULL REFERENCES workspaces(id),
  action       TEXT NOT NULL,
  key_id       TEXT,
  at           INTEGER NOT NULL
) STRICT;
CREATE INDEX audit_log_workspace ON audit_log (workspace_id, id);

CREATE TABLE contacts (
  id               TEXT PRIMARY KEY,
  workspace_id     TEXT NOT NULL REFERENCES workspaces(id),
  phone            TEXT NOT NULL,
  name             TEXT,
  consent_status   TEXT NOT NULL CHECK (consent_status IN ('unknown', 'opted_in', 'opted_out')),
  metadata         TEXT NOT NULL,      -- JSON object
  created_at       INTEGER NOT NULL,
  updated_at       INTEGER NOT NULL,
  last_activity_at INTEGER NOT NULL,
  UNIQUE (workspace_id, phone)
) STRICT;
CREATE INDEX contacts_activity ON contacts (workspace_id, last_activity_at DESC);

CREATE TABLE consent_ledger (
  id           INTEGER PRIMARY KEY,
  workspace_id TEXT NOT NULL REFERENCES workspaces(id),
  contact_id   TEXT NOT NULL REFERENCES contacts(id),
  status       TEXT NOT NULL,
  source       TEXT NOT NULL,          -- api_key:<key id>, inbound:<message id>, admin
  at           INTEGER NOT NULL
) STRICT;
CREATE INDEX consent_ledger_contact ON consent_ledger (contact_id, id);

CREATE TABLE suppressions (
  workspace_id TEXT NOT NULL REFERENCES workspaces(id),
  phone        TEXT NOT NULL,
  reason       TEXT,
  created_at   INTEGER NOT NULL,
  PRIMARY KEY (workspace_id, phone)
) STRICT, WITHOUT ROWID;
