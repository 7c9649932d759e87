-- A new number's warm-up: for its first `days` days its daily cap rises step by step from
-- `start_daily_cap` to the workspace's daily cap. JSON {days, start_daily_cap, started_at}; NULL: none.
ALTER TABLE connections ADD COLUMN warmup TEXT;
