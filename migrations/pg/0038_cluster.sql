-- Coordination between instances that share this database: see migrations/0038_cluster.sql. The
-- request counts are UNLOGGED: counting a request waits for no disk flush (a crash of the server
-- only resets the windows).

CREATE TABLE number_leases (
  connection_id TEXT PRIMARY KEY,
  owner         TEXT NOT NULL,
  expires_at    BIGINT NOT NULL
);

CREATE UNLOGGED TABLE rate_windows (
  subject    TEXT PRIMARY KEY,
  started_at BIGINT NOT NULL,
  n          BIGINT NOT NULL
);
CREATE INDEX rate_windows_start ON rate_windows (started_at);

CREATE TABLE sandbox_sends (
  connection_id TEXT NOT NULL,
  message_id    TEXT NOT NULL,
  external_id   TEXT NOT NULL,
  recipient     TEXT,
  group_id      TEXT,
  body          TEXT,
  attachments   BIGINT NOT NULL,
  at            TEXT NOT NULL
);
CREATE INDEX sandbox_sends_message ON sandbox_sends (connection_id, message_id);

CREATE TABLE sandbox_groups (
  connection_id TEXT PRIMARY KEY,
  groups        TEXT NOT NULL
);
