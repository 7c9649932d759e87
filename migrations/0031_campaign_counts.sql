-- A campaign's live counts (GET /campaigns and /campaigns/{id}), kept by triggers in the same
-- transaction as every change they count, instead of joining every recipient to its message on
-- each read (28-55 ms for one campaign of 90,000; a list of campaigns paid it per campaign).
--
-- Buckets: skipped, queued (recipients still pending, and messages queued or being sent), sent,
-- delivered, read, failed; every recipient is in one, so the total is their sum. A pending or
-- skipped recipient counts as itself, a released one through its message (which carries
-- campaign_id). An erased contact leaves the
-- counts with its recipient row, and its messages lose their campaign_id (see erasure.ts), so
-- nothing that happens to them later is counted.

CREATE TABLE campaign_counts (
  campaign_id TEXT NOT NULL,
  bucket      TEXT NOT NULL,
  n           INTEGER NOT NULL,
  PRIMARY KEY (campaign_id, bucket)
) STRICT, WITHOUT ROWID;

-- messages of recipients erased before this migration are no campaign's any more
UPDATE messages SET campaign_id = NULL
  WHERE campaign_id IS NOT NULL AND id NOT IN (SELECT message_id FROM campaign_recipients WHERE message_id IS NOT NULL);

INSERT INTO campaign_counts (campaign_id, bucket, n)
  SELECT campaign_id, bucket, COUNT(*) FROM (
    SELECT r.campaign_id,
      CASE WHEN r.status = 'skipped' THEN 'skipped' WHEN r.status = 'pending' OR m.status IN ('queued', 'sending') THEN 'queued' ELSE m.status END AS bucket
    FROM campaign_recipients r LEFT JOIN messages m ON m.id = r.message_id
  ) WHERE bucket IS NOT NULL GROUP BY campaign_id, bucket;

-- recipients: frozen (pending) at the start, then released, skipped, or deleted with their contact
CREATE TRIGGER campaign_counts_recipient_insert AFTER INSERT ON campaign_recipients BEGIN
  INSERT INTO campaign_counts (campaign_id, bucket, n) SELECT NEW.campaign_id, CASE NEW.status WHEN 'pending' THEN 'queued' ELSE NEW.status END, 1
    WHERE NEW.status IN ('pending', 'skipped') ON CONFLICT DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER campaign_counts_recipient_status AFTER UPDATE OF status ON campaign_recipients WHEN OLD.status IS NOT NEW.status BEGIN
  UPDATE campaign_counts SET n = n - 1 WHERE campaign_id = OLD.campaign_id AND bucket = CASE OLD.status WHEN 'pending' THEN 'queued' ELSE OLD.status END AND OLD.status IN ('pending', 'skipped');
  INSERT INTO campaign_counts (campaign_id, bucket, n) SELECT NEW.campaign_id, CASE NEW.status WHEN 'pending' THEN 'queued' ELSE NEW.status END, 1
    WHERE NEW.status IN ('pending', 'skipped') ON CONFLICT DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER campaign_counts_recipient_delete AFTER DELETE ON campaign_recipients BEGIN
  UPDATE campaign_counts SET n = n - 1 WHERE campaign_id = OLD.campaign_id AND bucket = CASE OLD.status WHEN 'pending' THEN 'queued' ELSE OLD.status END AND OLD.status IN ('pending', 'skipped');
  UPDATE campaign_counts SET n = n - 1 WHERE OLD.status = 'released' AND campaign_id = OLD.campaign_id
    AND bucket = (SELECT CASE WHEN status IN ('queued', 'sending') THEN 'queued' ELSE status END FROM messages WHERE id = OLD.message_id AND campaign_id = OLD.campaign_id);
END;

-- a released recipient's message: created (queued, or at once failed), then moving on
CREATE TRIGGER campaign_counts_message_insert AFTER INSERT ON messages WHEN NEW.campaign_id IS NOT NULL BEGIN
  INSERT INTO campaign_counts (campaign_id, bucket, n) VALUES (NEW.campaign_id, CASE WHEN NEW.status IN ('queued', 'sending') THEN 'queued' ELSE NEW.status END, 1)
    ON CONFLICT DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER campaign_counts_message_status AFTER UPDATE OF status ON messages
  WHEN NEW.campaign_id IS NOT NULL AND (CASE WHEN OLD.status IN ('queued', 'sending') THEN 'queued' ELSE OLD.status END) IS NOT (CASE WHEN NEW.status IN ('queued', 'sending') THEN 'queued' ELSE NEW.status END)
BEGIN
  UPDATE campaign_counts SET n = n - 1 WHERE campaign_id = NEW.campaign_id AND bucket = CASE WHEN OLD.status IN ('queued', 'sending') THEN 'queued' ELSE OLD.status END;
  INSERT INTO campaign_counts (campaign_id, bucket, n) VALUES (NEW.campaign_id, CASE WHEN NEW.status IN ('queued', 'sending') THEN 'queued' ELSE NEW.status END, 1)
    ON CONFLICT DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER campaign_counts_message_delete AFTER DELETE ON messages WHEN OLD.campaign_id IS NOT NULL BEGIN
  UPDATE campaign_counts SET n = n - 1 WHERE campaign_id = OLD.campaign_id AND bucket = CASE WHEN OLD.status IN ('queued', 'sending') THEN 'queued' ELSE OLD.status END;
END;
