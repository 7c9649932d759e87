-- A contact's conversation: GET /messages?contact_id= lists one contact's messages, newest first.
-- The index holds (contact_id, seq): an equality on contact_id reads it backwards in seq order.
-- Group messages have no contact and stay out of it.
CREATE INDEX messages_contact ON messages (contact_id) WHERE contact_id IS NOT NULL;
