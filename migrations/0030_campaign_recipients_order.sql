-- A campaign's recipients in their order (the index's implied rowid is seq), for GET
-- /campaigns/{id}/recipients: without it a page sorted every recipient of the campaign first
-- (31 ms for page 1 of 90,000).
CREATE INDEX campaign_recipients_order ON campaign_recipients (campaign_id);
