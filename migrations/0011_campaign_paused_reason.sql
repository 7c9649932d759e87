-- Why a campaign is paused: 'requested' (POST /campaigns/{id}/pause) or 'allowance_exhausted' (the
-- pacer paused it when the workspace's monthly allowance ran out; it resumes on its own when there
-- is room again). NULL when the campaign is not paused. Campaigns paused before this column existed
-- are treated as paused on request: only a resume moves them.
ALTER TABLE campaigns ADD COLUMN paused_reason TEXT CHECK (paused_reason IN ('requested', 'allowance_exhausted'));
UPDATE campaigns SET paused_reason = 'requested' WHERE status = 'paused';
