-- Media: malware-scanned uploads. Bytes live in CAPSTAN_DATA_DIR/media/<sha256[0:2]>/<sha256>
-- (content-addressed: identical content is stored once); rows are per workspace upload.

CREATE TABLE media (
  id           TEXT PRIMARY KEY,
  workspace_id TEXT NOT NULL REFERENCES workspaces(id),
  sha256       TEXT NOT NULL,
  filename     TEXT NOT NULL,
  mime_type    TEXT NOT NULL,
  size         INTEGER NOT NULL,
  created_at   INTEGER NOT NULL,
  expires_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX media_workspace ON media (workspace_id, created_at DESC);
CREATE INDEX media_sha ON media (sha256);
CREATE INDEX media_expiry ON media (expires_at);
