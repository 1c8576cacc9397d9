-- tracelog schema, version 12: the loss-spike rule's findings kept between refreshes, so that a grown log
-- is checked over its new lines only. A spike is a logged loss above `threshold` x the median of the 10
-- valid losses before it (at least 3 of them); `run_progress` says how far each run was checked, and from
-- which line the 10 losses before the next unchecked one start. A run whose rows change otherwise (a
-- merge, a changed threshold) loses both and is checked again from its first line.
-- IF NOT EXISTS: applying it twice (a version row lost) changes nothing.
CREATE TABLE IF NOT EXISTS loss_spikes (
    run_id         INTEGER NOT NULL,
    line_no        BIGINT NOT NULL,
    iteration      BIGINT,
    lm_loss        DOUBLE NOT NULL,
    running_median DOUBLE NOT NULL,   -- of the 10 valid losses before it (3 at least)
    ratio          DOUBLE NOT NULL    -- lm_loss / running_median
);

CREATE TABLE IF NOT EXISTS run_progress (
    run_id       INTEGER NOT NULL,
    rule         VARCHAR NOT NULL,    -- loss_spike
    checked_line BIGINT NOT NULL,     -- the last line checked
    context_line BIGINT NOT NULL,     -- the first of the lines the next check reads before its new ones
    threshold    DOUBLE               -- the threshold the rule ran with
);
