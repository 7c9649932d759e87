-- An API key may be limited to the addresses it is used from: a JSON array of IP addresses and
-- CIDR ranges (IPv4 and IPv6), stamped at issuance like its scopes. NULL: any address.
ALTER TABLE api_keys ADD COLUMN allowed_ips TEXT;
