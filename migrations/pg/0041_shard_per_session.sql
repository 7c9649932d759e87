-- The kept counts' shards (migration 0038), one per session. A shard was the session's process id
-- modulo 32, so two sessions could share one — and then each transaction that counted on it
-- waited for the other's commit on the same counts row (two instances on one database: 6,200–7,000
-- sends a second with every session on one shard, 9,000–9,900 with none shared). Now a session
-- takes the lowest shard no live session holds (a session-level advisory lock in the two-key
-- space, released when the session ends) on its first count, and keeps it; past 64 sessions it
-- falls back to its process id. Readers still sum whatever shards a key has rows in.
CREATE OR REPLACE FUNCTION capstan_shard() RETURNS INTEGER LANGUAGE plpgsql AS $$
DECLARE
  mine TEXT := current_setting('capstan.shard', true);
BEGIN
  IF mine IS NOT NULL AND mine <> '' THEN
    RETURN mine::INTEGER;
  END IF;
  -- (a setting made in a transaction that then failed is undone: the lock is not, and the same
  -- shard is found again below)
  FOR i IN 0..63 LOOP
    IF pg_try_advisory_lock(1397244242, i) THEN
      PERFORM set_config('capstan.shard', i::TEXT, false);
      RETURN i;
    END IF;
  END LOOP;
  PERFORM set_config('capstan.shard', (64 + pg_backend_pid() % 64)::TEXT, false);
  RETURN 64 + pg_backend_pid() % 64;
END $$;
