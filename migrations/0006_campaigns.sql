-- Templates and opt-in campaigns. A campaign's recipients are frozen into campaign_recipients
-- when it starts; each becomes a message only when its number releases it.

CREATE TABLE templates (
  id           TEXT PRIMARY KEY,
  workspace_id TEXT NOT NULL REFERENCES workspaces(id),
  name         TEXT NOT NULL,
  body         TEXT NOT NULL,
  category     TEXT NOT NULL CHECK (category IN ('utility', 'marketing')),
  variables    TEXT NOT NULL,          -- JSON array of the placeholders, in order of appearance
  created_at   INTEGER NOT NULL,
  updated_at   INTEGER NOT NULL,
  deleted_at   INTEGER
) STRICT;
CREATE INDEX templates_workspace ON templates (workspace_id, created_at DESC);

CREATE TABLE campaigns (
  id            TEXT PRIMARY KEY,
  workspace_id  TEXT NOT NULL REFERENCES workspaces(id),
  name          TEXT NOT NULL,
  template_id   TEXT NOT NULL REFERENCES templates(id),
  connection_id TEXT NOT NULL REFERENCES connections(id),
  audience      TEXT NOT NULL,         -- JSON {metadata?: {key: value}}
  variables     TEXT NOT NULL,         -- JSON {"1": "...", ...} for numbered placeholders
  body          TEXT,                  -- the template body, snapshotted when the campaign starts
  status        TEXT NOT NULL CHECK (status IN ('draft', 'scheduled', 'running', 'paused', 'completed', 'cancelled')),
  scheduled_at  INTEGER,
  started_at    INTEGER,
  finished_at   INTEGER,
  created_at    INTEGER NOT NULL,
  updated_at    INTEGER NOT NULL,
  deleted_at    INTEGER
) STRICT;
CREATE INDEX campaigns_workspace ON campaigns (workspace_id, created_at DESC);
CREATE INDEX campaigns_active ON campaigns (connection_id, status) WHERE status IN ('scheduled', 'running', 'paused');

CREATE TABLE campaign_recipients (
  seq            INTEGER PRIMARY KEY,
  campaign_id    TEXT NOT NULL REFERENCES campaigns(id),
  contact_id     TEXT NOT NULL REFERENCES contacts(id),
  phone          TEXT NOT NULL,
  status         TEXT NOT NULL CHECK (status IN ('pending', 'released', 'skipped')),
  message_id     TEXT,
  skipped_reason TEXT,
  updated_at     INTEGER NOT NULL,
  UNIQUE (campaign_id, contact_id)
) STRICT;
CREATE INDEX campaign_recipients_pending ON campaign_recipients (campaign_id, seq) WHERE status = 'pending';

ALTER TABLE messages ADD COLUMN campaign_id TEXT;
CREATE INDEX messages_campaign ON messages (campaign_id, status) WHERE campaign_id IS NOT NULL;
