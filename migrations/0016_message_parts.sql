-- The network's ids of a message's later parts: a Cloud API message with several attachments (or
-- a voice note and text) goes out as one network message per part, and a reply may quote any of
-- them. The first part's id stays in messages.external_id.
CREATE TABLE message_parts (
  connection_id TEXT NOT NULL,
  external_id   TEXT NOT NULL,
  message_id    TEXT NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
  PRIMARY KEY (connection_id, external_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX message_parts_message ON message_parts (message_id);
