-- WhatsApp's customer-service window: a free-form message reaches a person only within 24 hours of
-- their last message to that number (after that, only a template). The time of each person's last
-- inbound message per number, kept by numbers whose network has such a window (the Cloud API).
CREATE TABLE service_windows (
  connection_id   TEXT NOT NULL,
  phone           TEXT NOT NULL,
  workspace_id    TEXT NOT NULL,
  last_inbound_at INTEGER NOT NULL,
  PRIMARY KEY (connection_id, phone)
) STRICT, WITHOUT ROWID;
CREATE INDEX service_windows_phone ON service_windows (workspace_id, phone);
