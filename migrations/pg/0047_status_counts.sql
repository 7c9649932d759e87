-- The kept counts of a change of status (message_counts, message_outcome_counts, campaign_counts)
-- are added once per statement, grouped, instead of by a PL/pgSQL trigger per row: the releases
-- and outcomes of one turn are one UPDATE each (src/modules/messages/store.ts: the claim and a
-- status's write are merged statements), and each row's trigger made three or four upserts of the
-- same few count rows inside one transaction, which PostgreSQL slows down with every change of the
-- same row: they were two thirds of a release's time (BENCHMARKS.md, session 38). The counts mean
-- what they meant: a message moved from one status to another takes one from the old and adds one
-- to the new (its workspace and direction as they were and are), an outbound one reaching sent,
-- delivered, read or failed adds one outcome, and a campaign's message moving between the
-- campaign's buckets moves its count. A statement trigger with transition tables cannot name
-- columns (UPDATE OF status): it runs after every UPDATE of messages and finds the rows whose
-- status changed (a status that changed was in the statement's SET list, as the row triggers
-- asked). Written to run again on a database that has it (CREATE OR REPLACE, IF EXISTS).

CREATE OR REPLACE FUNCTION message_status_counts_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- one statement: the rows whose status changed are found once, and each count added from them
  WITH moved AS MATERIALIZED (
    SELECT o.workspace_id AS old_workspace, o.direction AS old_direction, o.status AS old_status,
           o.campaign_id AS old_campaign, a.workspace_id, a.direction, a.status, a.error_code, a.campaign_id
    FROM old_rows o JOIN new_rows a ON a.seq = o.seq WHERE a.status IS DISTINCT FROM o.status
  ), counted AS (
    INSERT INTO message_counts AS c (workspace_id, direction, status, shard, n)
      SELECT workspace_id, direction, status, capstan_shard(), SUM(d) FROM (
        SELECT old_workspace AS workspace_id, old_direction AS direction, old_status AS status, -1 AS d FROM moved
        UNION ALL
        SELECT workspace_id, direction, status, 1 FROM moved
      ) AS each_move
      GROUP BY workspace_id, direction, status HAVING SUM(d) <> 0
      ON CONFLICT (workspace_id, direction, status, shard) DO UPDATE SET n = c.n + excluded.n
  ), outcomes AS (
    INSERT INTO message_outcome_counts AS c (status, code, shard, n)
      SELECT status, CASE WHEN status = 'failed' THEN COALESCE(error_code, '') ELSE '' END, capstan_shard(), COUNT(*) FROM moved
      WHERE direction = 'outbound' AND status IN ('sent', 'delivered', 'read', 'failed')
      GROUP BY 1, 2
      ON CONFLICT (status, code, shard) DO UPDATE SET n = c.n + excluded.n
  )
  INSERT INTO campaign_counts AS c (campaign_id, bucket, shard, n)
    SELECT campaign_id, bucket, capstan_shard(), SUM(d) FROM (
      SELECT old_campaign AS campaign_id, campaign_bucket_of_message(old_status) AS bucket, -1 AS d FROM moved
        WHERE campaign_id IS NOT NULL AND old_campaign IS NOT NULL AND campaign_bucket_of_message(status) IS DISTINCT FROM campaign_bucket_of_message(old_status)
      UNION ALL
      SELECT campaign_id, campaign_bucket_of_message(status), 1 FROM moved
        WHERE campaign_id IS NOT NULL AND campaign_bucket_of_message(status) IS DISTINCT FROM campaign_bucket_of_message(old_status)
    ) AS each_move
    GROUP BY campaign_id, bucket HAVING SUM(d) <> 0
    ON CONFLICT (campaign_id, bucket, shard) DO UPDATE SET n = c.n + excluded.n;
  RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS message_counts_status ON messages;
DROP TRIGGER IF EXISTS message_outcome_counts_status ON messages;
DROP TRIGGER IF EXISTS campaign_counts_message_status ON messages;
CREATE OR REPLACE TRIGGER message_status_counts AFTER UPDATE ON messages REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION message_status_counts_moved();
