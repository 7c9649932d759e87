-- A campaign's send window: its messages are released only between `from` and `to` (HH:MM) in
-- `time_zone` (IANA), so a campaign that runs for days never messages people at night. JSON
-- {from, to, time_zone}; NULL: any time.
ALTER TABLE campaigns ADD COLUMN send_window TEXT;
