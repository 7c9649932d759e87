-- WhatsApp's customer-service window: see migrations/0039_service_windows.sql.
CREATE TABLE service_windows (
  connection_id   TEXT NOT NULL,
  phone           TEXT NOT NULL,
  workspace_id    TEXT NOT NULL,
  last_inbound_at BIGINT NOT NULL,
  PRIMARY KEY (connection_id, phone)
);
CREATE INDEX service_windows_phone ON service_windows (workspace_id, phone);
