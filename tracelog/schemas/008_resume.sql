-- tracelog schema, version 8: growth resumes where the last ingest stopped.
-- `fingerprint` (was `sha256`) identifies the committed bytes for duplicate detection: the sha256 of the
-- concatenated sha256 of every MiB of them (the last, partial MiB included) and their length, so that a
-- grown file's fingerprint is computed from the digests kept in `chunk_digests` (32 bytes per MiB) and its
-- new bytes only, and a prefix is checked by re-hashing a sample of its MiBs instead of all of it.
-- A row whose `chunk_digests` is NULL was ingested before this version: its fingerprint is the plain
-- sha256 of the file, and it is compared as such.
-- `resume_state` is the parser's state (JSON) after the last complete line, for parsers that can resume;
-- `resume_version` the parser version that wrote it (another version parses the file again from its start).
ALTER TABLE sources RENAME COLUMN sha256 TO fingerprint;
ALTER TABLE sources ADD COLUMN chunk_digests BLOB;
ALTER TABLE sources ADD COLUMN resume_state VARCHAR;
ALTER TABLE sources ADD COLUMN resume_version VARCHAR;
