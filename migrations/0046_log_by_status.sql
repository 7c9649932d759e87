-- Nothing changes on SQLite: the PostgreSQL migration of the same version makes the index of the
-- log's filtered pages again, ordered by -seq (migrations/pg/0046_log_by_status.sql); SQLite reads
-- them through its own, named in the statement (INDEXED BY). The versions stay in step.
SELECT 1;
