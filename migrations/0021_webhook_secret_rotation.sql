-- Rotating a webhook endpoint's signing secret: the secret it replaced keeps signing (beside the
-- new one, Standard Webhooks' space-separated signatures) until previous_secret_expires_at, so a
-- receiver can switch to the new secret without refusing an event in between.
ALTER TABLE webhook_endpoints ADD COLUMN previous_secret_enc TEXT;  -- AES-256-GCM, like secret_enc
ALTER TABLE webhook_endpoints ADD COLUMN previous_secret_expires_at INTEGER;
