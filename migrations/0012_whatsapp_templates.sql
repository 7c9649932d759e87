-- A template may name the Meta-approved WhatsApp template it stands for (JSON {"name", "language"},
-- NULL when none). A campaign snapshots it when it starts, like the body; each message the campaign
-- releases carries what a network that sends such templates needs (JSON {"name", "language",
-- "parameters": [...]}: the values of the body's placeholders in order of first appearance).
ALTER TABLE templates ADD COLUMN whatsapp TEXT;
ALTER TABLE campaigns ADD COLUMN whatsapp TEXT;
ALTER TABLE messages ADD COLUMN network_template TEXT;
