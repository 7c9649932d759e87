-- What the last import from the network wrote into a template (JSON [body, category, whatsapp]).
-- While the template still holds exactly that, it is as imported, and a later import brings it up
-- to date when the network's template has changed; once edited here, it is left as it is. NULL:
-- made by hand, or imported before this migration (left as it is, as before).
ALTER TABLE templates ADD COLUMN imported TEXT;
