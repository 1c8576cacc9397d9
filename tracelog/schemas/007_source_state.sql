-- tracelog schema, version 7: what a source still owes after its commit. `refresh_pending` is set in the
-- file's own transaction and cleared in the transaction of the refresh of its predictions and flags, so a
-- refresh that failed or was killed is found and redone by the next command; `refresh_error` says why the
-- last one failed. `bytes` is now the offset after the last complete line, and `bytes_pending` the length
-- of a last line still without its newline (held back, not parsed, until the newline arrives).
-- IF NOT EXISTS: applying it twice (a version row lost) changes nothing.
ALTER TABLE sources ADD COLUMN IF NOT EXISTS refresh_pending BOOLEAN DEFAULT false;
ALTER TABLE sources ADD COLUMN IF NOT EXISTS refresh_error VARCHAR;
ALTER TABLE sources ADD COLUMN IF NOT EXISTS bytes_pending BIGINT DEFAULT 0;
