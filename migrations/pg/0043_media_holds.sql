-- A file in the media store held from before it is written until the record that uses it is
-- committed (src/modules/media/holds.ts), where instances share the database and the bucket: a
-- file is removed only when no record refers to it and no hold is live, under a lock a new hold
-- waits for. One process (SQLite) holds in memory; the table is there on both engines alike.
CREATE TABLE media_holds (
  blob   TEXT NOT NULL,
  holder TEXT NOT NULL,
  until  BIGINT NOT NULL,
  PRIMARY KEY (blob, holder)
);
CREATE INDEX media_holds_until ON media_holds (until);
