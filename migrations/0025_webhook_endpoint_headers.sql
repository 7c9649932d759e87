-- Extra headers an endpoint's requests carry (a receiver behind a gateway that wants its own
-- credentials, e.g. Cloudflare Access): a JSON object, AES-256-GCM encrypted like the secret
-- (values may be credentials). NULL: none.
ALTER TABLE webhook_endpoints ADD COLUMN headers_enc TEXT;
