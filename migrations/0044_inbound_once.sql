-- A message received is logged once per network id (Meta's wamid), however many copies arrive at
-- once: the check for one logged before and the insert may run side by side (two instances on
-- PostgreSQL, or two writes of one shared transaction), so the database refuses the second, and
-- that write runs again and finds the first. Copies logged before this (possible on PostgreSQL)
-- keep their rows; the earliest keeps the network id.
UPDATE messages SET external_id = NULL
WHERE direction = 'inbound' AND external_id IS NOT NULL
  AND EXISTS (SELECT 1 FROM messages o WHERE o.connection_id = messages.connection_id AND o.external_id = messages.external_id AND o.direction = 'inbound' AND o.seq < messages.seq);
CREATE UNIQUE INDEX messages_inbound_once ON messages (connection_id, external_id) WHERE direction = 'inbound' AND external_id IS NOT NULL;
