-- A campaign may carry one media file (an image, video or document above the text; a WhatsApp
-- template's media header). Media a scheduled, running or paused campaign uses is kept past its
-- retention until the campaign ends; the index serves that check in the retention job.
ALTER TABLE campaigns ADD COLUMN media_id TEXT;
CREATE INDEX campaigns_media ON campaigns (media_id) WHERE media_id IS NOT NULL;
