-- Counters for /metrics that only go up: how many outbound messages reached sent, delivered, read
-- and failed (by error code), kept by a trigger in the same transaction as the status change — a
-- batch of writes run again after a failure counts once, and the counts survive restarts.

CREATE TABLE message_outcome_counts (
  status TEXT NOT NULL,
  code   TEXT NOT NULL,
  n      INTEGER NOT NULL,
  PRIMARY KEY (status, code)
) STRICT, WITHOUT ROWID;

CREATE TRIGGER message_outcome_counts_status AFTER UPDATE OF status ON messages
  WHEN OLD.status IS NOT NEW.status AND NEW.direction = 'outbound' AND NEW.status IN ('sent', 'delivered', 'read', 'failed')
BEGIN
  INSERT INTO message_outcome_counts (status, code, n) VALUES (NEW.status, CASE WHEN NEW.status = 'failed' THEN COALESCE(NEW.error_code, '') ELSE '' END, 1)
    ON CONFLICT (status, code) DO UPDATE SET n = n + 1;
END;
