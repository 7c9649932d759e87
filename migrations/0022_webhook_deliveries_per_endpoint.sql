-- The dispatcher takes due deliveries endpoint by endpoint (at most a few under way to each), so
-- one endpoint's backlog, or a receiver that hangs, cannot hold up the others: an index to find
-- an endpoint's due deliveries, and its next one, without reading anyone else's.
CREATE INDEX webhook_deliveries_endpoint_due ON webhook_deliveries (endpoint_id, next_attempt_at) WHERE status = 'pending';
