-- Workspaces and numbers are never deleted (a workspace is deactivated, a removed number keeps its
-- row with deleted_at): the rows that name them — messages, contacts, usage — may count on it.
-- Both engines now refuse such a deletion outright. On PostgreSQL the same migration
-- (migrations/pg/0040_send_path.sql) also stops re-checking those parents on every insert of a
-- send and adds the kept counts of new messages and contacts once per statement; SQLite's checks
-- and per-row triggers cost nothing worth saving and stay as they are.
CREATE TRIGGER workspaces_kept BEFORE DELETE ON workspaces BEGIN
  SELECT RAISE(ABORT, 'workspaces are never deleted: deactivate it');
END;
CREATE TRIGGER connections_kept BEFORE DELETE ON connections BEGIN
  SELECT RAISE(ABORT, 'numbers are never deleted: remove it (its row stays)');
END;
