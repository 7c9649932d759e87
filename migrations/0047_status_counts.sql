-- Nothing changes on SQLite: the PostgreSQL migration of the same version adds the kept counts of
-- a change of status once per statement (migrations/pg/0047_status_counts.sql); SQLite's triggers
-- per row cost a function call each, in the process. The versions stay in step.
SELECT 1;
