-- Messaging: connected numbers, the message log and per-number queues, idempotency records,
-- monthly usage, webhook endpoints and their durable delivery outbox.

CREATE TABLE connections (
  id           TEXT PRIMARY KEY,
  workspace_id TEXT NOT NULL REFERENCES workspaces(id),
  phone        TEXT NOT NULL,
  name         TEXT,
  driver       TEXT NOT NULL,
  status       TEXT NOT NULL CHECK (status IN ('online', 'offline')),
  receives     INTEGER NOT NULL,
  config       TEXT NOT NULL,          -- JSON, driver specific
  created_at   INTEGER NOT NULL,
  updated_at   INTEGER NOT NULL,
  deleted_at   INTEGER
) STRICT;
CREATE INDEX connections_workspace ON connections (workspace_id, created_at);

CREATE TABLE messages (
  seq            INTEGER PRIMARY KEY,  -- arrival order: FIFO per number, newest-first listing
  id             TEXT NOT NULL UNIQUE,
  workspace_id   TEXT NOT NULL REFERENCES workspaces(id),
  connection_id  TEXT NOT NULL REFERENCES connections(id),
  contact_id     TEXT REFERENCES contacts(id),
  group_id       TEXT,
  direction      TEXT NOT NULL CHECK (direction IN ('inbound', 'outbound')),
  status         TEXT NOT NULL CHECK (status IN ('queued', 'sending', 'sent', 'delivered', 'read', 'failed')),
  recipient      TEXT,
  sender         TEXT,
  body           TEXT,
  attachments    TEXT NOT NULL,        -- JSON array of media ids
  error_code     TEXT,
  error_message  TEXT,
  external_id    TEXT,
  created_at     INTEGER NOT NULL,
  updated_at     INTEGER NOT NULL,
  sending_at     INTEGER,
  sent_at        INTEGER,
  delivered_at   INTEGER,
  read_at        INTEGER,
  failed_at      INTEGER
) STRICT;
CREATE INDEX messages_log ON messages (workspace_id, seq DESC);
CREATE INDEX messages_log_direction ON messages (workspace_id, direction, seq DESC);
CREATE INDEX messages_log_status ON messages (workspace_id, status, seq DESC);
CREATE INDEX messages_queue ON messages (connection_id, seq) WHERE status = 'queued';
CREATE INDEX messages_in_flight ON messages (status) WHERE status = 'sending';
CREATE INDEX messages_releases ON messages (connection_id, sending_at) WHERE sending_at IS NOT NULL;
CREATE INDEX messages_external ON messages (connection_id, external_id) WHERE external_id IS NOT NULL;

CREATE TABLE usage_monthly (
  workspace_id TEXT NOT NULL REFERENCES workspaces(id),
  month        TEXT NOT NULL,          -- YYYY-MM (UTC)
  messages     INTEGER NOT NULL,
  PRIMARY KEY (workspace_id, month)
) STRICT, WITHOUT ROWID;

CREATE TABLE idempotency_keys (
  api_key_id   TEXT NOT NULL,
  method       TEXT NOT NULL,
  path         TEXT NOT NULL,
  idem_key     TEXT NOT NULL,
  fingerprint  TEXT NOT NULL,
  status       INTEGER NOT NULL,
  body         TEXT NOT NULL,
  created_at   INTEGER NOT NULL,
  PRIMARY KEY (api_key_id, method, path, idem_key)
) STRICT, WITHOUT ROWID;
CREATE INDEX idempotency_expiry ON idempotency_keys (created_at);

CREATE TABLE webhook_endpoints (
  id            TEXT PRIMARY KEY,
  workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
  url           TEXT NOT NULL,
  events        TEXT,                  -- JSON array; NULL = every event
  secret_enc    TEXT NOT NULL,         -- the signing secret, AES-256-GCM encrypted
  status        TEXT NOT NULL CHECK (status IN ('active', 'disabled')),
  failing_since INTEGER,
  created_at    INTEGER NOT NULL,
  updated_at    INTEGER NOT NULL,
  deleted_at    INTEGER
) STRICT;
CREATE INDEX webhook_endpoints_workspace ON webhook_endpoints (workspace_id);

CREATE TABLE webhook_deliveries (
  seq              INTEGER PRIMARY KEY,
  id               TEXT NOT NULL UNIQUE, -- the webhook-id header: same on every retry
  endpoint_id      TEXT NOT NULL REFERENCES webhook_endpoints(id),
  workspace_id     TEXT NOT NULL,
  type             TEXT NOT NULL,
  payload          TEXT NOT NULL,
  status           TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
  attempts         INTEGER NOT NULL,
  next_attempt_at  INTEGER,
  last_status_code INTEGER,
  last_error       TEXT,
  created_at       INTEGER NOT NULL,
  updated_at       INTEGER NOT NULL,
  delivered_at     INTEGER
) STRICT;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, seq DESC);
