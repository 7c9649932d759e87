-- Counts behind the message log's meta.total, kept by triggers in the same transaction as every
-- insert, status change and delete, so a page of the log never counts a million rows.

CREATE TABLE message_counts (
  workspace_id TEXT NOT NULL,
  direction    TEXT NOT NULL,
  status       TEXT NOT NULL,
  n            INTEGER NOT NULL,
  PRIMARY KEY (workspace_id, direction, status)
) STRICT, WITHOUT ROWID;

INSERT INTO message_counts (workspace_id, direction, status, n)
  SELECT workspace_id, direction, status, COUNT(*) FROM messages GROUP BY workspace_id, direction, status;

CREATE TRIGGER message_counts_insert AFTER INSERT ON messages BEGIN
  INSERT INTO message_counts (workspace_id, direction, status, n) VALUES (NEW.workspace_id, NEW.direction, NEW.status, 1)
    ON CONFLICT (workspace_id, direction, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER message_counts_status AFTER UPDATE OF status ON messages WHEN OLD.status IS NOT NEW.status BEGIN
  UPDATE message_counts SET n = n - 1 WHERE workspace_id = OLD.workspace_id AND direction = OLD.direction AND status = OLD.status;
  INSERT INTO message_counts (workspace_id, direction, status, n) VALUES (NEW.workspace_id, NEW.direction, NEW.status, 1)
    ON CONFLICT (workspace_id, direction, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER message_counts_delete AFTER DELETE ON messages BEGIN
  UPDATE message_counts SET n = n - 1 WHERE workspace_id = OLD.workspace_id AND direction = OLD.direction AND status = OLD.status;
END;

CREATE INDEX messages_log_direction_status ON messages (workspace_id, direction, status, seq DESC);
