-- A released message the network has not got yet when the server stops gracefully (waiting out
-- the network's "slow down" or a retry, or for its attachment while the media store is away)
-- stays `sending` — a status never moves back — marked 1 here: the instance that takes its
-- number next (the next start, or another instance) hands it to the network then, instead of
-- failing it as interrupted. Cleared (in a write of its own) before it is handed over again.
ALTER TABLE messages ADD COLUMN resend INTEGER NOT NULL DEFAULT 0;
