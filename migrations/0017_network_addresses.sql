-- A recipient's address as the network reports it when it differs from the number Capstan sent to
-- (WhatsApp answers a send with the person's wa_id, which for some numbers — older Brazilian
-- mobiles without the ninth digit, Mexican ones with or without the 1 — is not the number given).
-- The network's messages from that address are that contact's: replies, STOP, "Stop promotions".
CREATE TABLE network_addresses (
  workspace_id TEXT NOT NULL,
  address      TEXT NOT NULL,
  phone        TEXT NOT NULL,
  PRIMARY KEY (workspace_id, address)
) STRICT, WITHOUT ROWID;
