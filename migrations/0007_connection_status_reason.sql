-- Why a connection is offline (e.g. the network rejected its access token), for operators.
ALTER TABLE connections ADD COLUMN status_reason TEXT;
