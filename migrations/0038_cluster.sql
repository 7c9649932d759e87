-- Coordination between instances that share one database (PostgreSQL): which instance releases
-- each number's queue (a lease it renews; another takes it over once it has run out), and the
-- request limits counted across instances. On SQLite one process is the whole truth: it holds
-- every lease, and its limits are counted in memory (the table stays empty).

CREATE TABLE number_leases (
  connection_id TEXT PRIMARY KEY,
  owner         TEXT NOT NULL,
  expires_at    INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE rate_windows (
  subject    TEXT PRIMARY KEY,
  started_at INTEGER NOT NULL,
  n          INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX rate_windows_start ON rate_windows (started_at);

-- The sandbox network's record of the sends it accepted and the groups the operator gave it, where
-- every instance can read them (on SQLite the record is a file in the data directory and the
-- groups stay in memory; these tables stay empty).
CREATE TABLE sandbox_sends (
  connection_id TEXT NOT NULL,
  message_id    TEXT NOT NULL,
  external_id   TEXT NOT NULL,
  recipient     TEXT,
  group_id      TEXT,
  body          TEXT,
  attachments   INTEGER NOT NULL,
  at            TEXT NOT NULL
) STRICT;
-- not unique: a message the network took twice would show as two lines (what tests check never happens)
CREATE INDEX sandbox_sends_message ON sandbox_sends (connection_id, message_id);

CREATE TABLE sandbox_groups (
  connection_id TEXT PRIMARY KEY,
  groups        TEXT NOT NULL
) STRICT, WITHOUT ROWID;

-- Kept counts spread over shards on PostgreSQL (see pg/0038_cluster.sql): there every transaction
-- adds to its own connection's row and readers sum them, so concurrent sends do not queue for one
-- row. Here one writer holds the file anyway: every count stays in shard 0.
ALTER TABLE message_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE contact_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE suppression_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_delivery_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE campaign_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE message_outcome_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_monthly ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
