-- Identical uploads are stored once per workspace, not once for the whole server: a file shared
-- across workspaces let one tenant learn (from a faster upload) that another held the same bytes.
-- `blob` names the stored file: for new uploads a digest of the workspace and the content's
-- SHA-256; files stored before this version keep their content address.

ALTER TABLE media ADD COLUMN blob TEXT NOT NULL DEFAULT '';
UPDATE media SET blob = sha256;
DROP INDEX media_sha;
CREATE INDEX media_blob ON media (blob);
