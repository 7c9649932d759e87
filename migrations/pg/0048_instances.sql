-- Instances sharing one database (PostgreSQL): each notes when it was last seen at every renewal
-- of its number leases (every 3 s), and drops its row at a graceful stop. A request's hold on an
-- Idempotency-Key names the instance that took it (claimed_by): another instance may take the key
-- over as soon as that instance is no longer seen (10 s), not only after the hold's 30 s. The
-- embedded SQLite file (one process) never writes them; both schemas keep them in step.
CREATE TABLE instances (
  name    TEXT PRIMARY KEY,
  seen_at BIGINT NOT NULL
);
ALTER TABLE idempotency_keys ADD COLUMN claimed_by TEXT;
