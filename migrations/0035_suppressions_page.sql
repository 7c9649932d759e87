-- A page of a workspace's suppression list, newest first, without reading the whole list: an
-- index in the page's order, and the count behind meta.total kept by triggers in the same
-- transaction as every insert and delete. With 1,000,000 suppressions a page sorted them all
-- (~75 ms) and counted them all (~46 ms), on every page, with nothing else served meanwhile.

CREATE INDEX suppressions_newest ON suppressions (workspace_id, created_at DESC, phone);

CREATE TABLE suppression_counts (
  workspace_id TEXT PRIMARY KEY,
  n            INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

INSERT INTO suppression_counts (workspace_id, n) SELECT workspace_id, COUNT(*) FROM suppressions GROUP BY workspace_id;

CREATE TRIGGER suppression_counts_insert AFTER INSERT ON suppressions BEGIN
  INSERT INTO suppression_counts (workspace_id, n) VALUES (NEW.workspace_id, 1)
    ON CONFLICT (workspace_id) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER suppression_counts_delete AFTER DELETE ON suppressions BEGIN
  UPDATE suppression_counts SET n = n - 1 WHERE workspace_id = OLD.workspace_id;
END;
