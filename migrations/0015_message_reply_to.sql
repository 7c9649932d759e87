-- An inbound message that answers one of ours (a reply, or a tap on one of its buttons) names it:
-- the id of our message, found by the network's id the reply quotes.
ALTER TABLE messages ADD COLUMN reply_to TEXT;
