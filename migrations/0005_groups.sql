-- Groups: the mirror of what each connected number reports. Participant numbers are counted when
-- the list is read and never stored. The id is stable per (connection, external id) across syncs.

CREATE TABLE groups (
  id                TEXT PRIMARY KEY,
  workspace_id      TEXT NOT NULL REFERENCES workspaces(id),
  connection_id     TEXT NOT NULL REFERENCES connections(id),
  external_id       TEXT NOT NULL,
  name              TEXT NOT NULL,
  name_fold         TEXT NOT NULL,      -- lower-cased name, for case-insensitive search
  participant_count INTEGER NOT NULL,
  announce          INTEGER NOT NULL,
  is_admin          INTEGER NOT NULL,
  synced_at         INTEGER NOT NULL,
  created_at        INTEGER NOT NULL,
  UNIQUE (connection_id, external_id)
) STRICT;
CREATE INDEX groups_largest ON groups (workspace_id, participant_count DESC, name_fold, id);

CREATE INDEX messages_group ON messages (group_id) WHERE group_id IS NOT NULL;
