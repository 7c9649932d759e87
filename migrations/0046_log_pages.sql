-- Nothing changes on SQLite: the PostgreSQL migration of the same version makes the indexes of the
-- log's filtered pages and of a contact's messages again, ordered by -seq
-- (migrations/pg/0046_log_pages.sql); SQLite reads those pages through its own, named in the
-- statements (INDEXED BY), in seq order. The versions stay in step.
SELECT 1;
