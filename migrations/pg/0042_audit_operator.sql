-- An audit entry says how its operator signed the request (via: dashboard, cli or admin_token) and
-- from which address (ip). NULL for the entries written before.
ALTER TABLE audit_log ADD COLUMN via TEXT;
ALTER TABLE audit_log ADD COLUMN ip TEXT;
