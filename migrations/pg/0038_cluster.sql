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

-- Kept counts spread over shards: each change adds +1 or -1 to the row of (its key, the
-- connection's shard), so transactions on different connections never wait for one hot row (a
-- workspace's queued count, its month's usage); readers sum the shards.
CREATE FUNCTION capstan_shard() RETURNS INTEGER LANGUAGE sql AS $$ SELECT pg_backend_pid() % 32 $$;

ALTER TABLE message_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE message_counts DROP CONSTRAINT message_counts_pkey, ADD PRIMARY KEY (workspace_id, direction, status, shard);
ALTER TABLE contact_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE contact_counts DROP CONSTRAINT contact_counts_pkey, ADD PRIMARY KEY (workspace_id, shard);
ALTER TABLE suppression_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE suppression_counts DROP CONSTRAINT suppression_counts_pkey, ADD PRIMARY KEY (workspace_id, shard);
ALTER TABLE webhook_delivery_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_delivery_counts DROP CONSTRAINT webhook_delivery_counts_pkey, ADD PRIMARY KEY (endpoint_id, shard);
ALTER TABLE campaign_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE campaign_counts DROP CONSTRAINT campaign_counts_pkey, ADD PRIMARY KEY (campaign_id, bucket, shard);
ALTER TABLE message_outcome_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE message_outcome_counts DROP CONSTRAINT message_outcome_counts_pkey, ADD PRIMARY KEY (status, code, shard);
ALTER TABLE usage_monthly ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_monthly DROP CONSTRAINT usage_monthly_pkey, ADD PRIMARY KEY (workspace_id, month, shard);

CREATE OR REPLACE FUNCTION message_counts_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    INSERT INTO message_counts AS c (workspace_id, direction, status, shard, n) VALUES (OLD.workspace_id, OLD.direction, OLD.status, capstan_shard(), -1)
      ON CONFLICT (workspace_id, direction, status, shard) DO UPDATE SET n = c.n - 1;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO message_counts AS c (workspace_id, direction, status, shard, n) VALUES (NEW.workspace_id, NEW.direction, NEW.status, capstan_shard(), 1)
      ON CONFLICT (workspace_id, direction, status, shard) DO UPDATE SET n = c.n + 1;
  END IF;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION contact_counts_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO contact_counts AS c (workspace_id, shard, n) VALUES (CASE WHEN TG_OP = 'INSERT' THEN NEW.workspace_id ELSE OLD.workspace_id END, capstan_shard(), CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE -1 END)
    ON CONFLICT (workspace_id, shard) DO UPDATE SET n = c.n + excluded.n;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION suppression_counts_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO suppression_counts AS c (workspace_id, shard, n) VALUES (CASE WHEN TG_OP = 'INSERT' THEN NEW.workspace_id ELSE OLD.workspace_id END, capstan_shard(), CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE -1 END)
    ON CONFLICT (workspace_id, shard) DO UPDATE SET n = c.n + excluded.n;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION webhook_delivery_counts_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO webhook_delivery_counts AS c (endpoint_id, shard, n) VALUES (CASE WHEN TG_OP = 'INSERT' THEN NEW.endpoint_id ELSE OLD.endpoint_id END, capstan_shard(), CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE -1 END)
    ON CONFLICT (endpoint_id, shard) DO UPDATE SET n = c.n + excluded.n;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION campaign_counts_add(campaign TEXT, b TEXT, delta BIGINT) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO campaign_counts AS c (campaign_id, bucket, shard, n) VALUES (campaign, b, capstan_shard(), delta)
    ON CONFLICT (campaign_id, bucket, shard) DO UPDATE SET n = c.n + delta;
END $$;

CREATE OR REPLACE FUNCTION message_outcome_counts_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO message_outcome_counts AS c (status, code, shard, n) VALUES (NEW.status, CASE WHEN NEW.status = 'failed' THEN COALESCE(NEW.error_code, '') ELSE '' END, capstan_shard(), 1)
    ON CONFLICT (status, code, shard) DO UPDATE SET n = c.n + 1;
  RETURN NULL;
END $$;
