-- A one-to-one send of a marketing template may leave only while its recipient is opted in
-- (1); the consent is checked again when the message is released, like opt-outs.
ALTER TABLE messages ADD COLUMN opt_in_required INTEGER NOT NULL DEFAULT 0;
