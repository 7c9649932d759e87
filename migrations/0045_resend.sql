-- A released message the network does not have right now stays `sending` (a status never moves
-- back) and is marked 1 here: while it waits out a retry or the network's "slow down" (marked as
-- its wait begins), or when a graceful stop hands it back (its attachment unreadable for now, or
-- not handed over yet). The instance that takes its number next (the next start, or another
-- instance) hands it to the network then, instead of failing it as interrupted. The mark is
-- cleared, in a write of its own, before the message is handed over again: by one instance only.
ALTER TABLE messages ADD COLUMN resend INTEGER NOT NULL DEFAULT 0;
