-- Every message insert updates every index on messages. The log's direction-only and status-only
-- filters no longer need indexes of their own: they read the (workspace, direction, status, seq)
-- index once per status or per direction and merge the ranges in seq order (MessageRepo.list).
DROP INDEX messages_log_direction;
DROP INDEX messages_log_status;
