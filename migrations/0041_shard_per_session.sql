-- Nothing changes on SQLite: the PostgreSQL migration of the same version gives each session its
-- own shard of the kept counts (migrations/pg/0041_shard_per_session.sql); SQLite has one writer
-- and no shards. The versions stay in step.
SELECT 1;
