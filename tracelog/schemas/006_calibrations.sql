-- The model's free constants fitted to the runs and benches in the store (`tracelog calibrate`).
-- One row per constant and scope; a refit replaces the row. Errors are medians of |ln(predicted /
-- measured)| over the subjects: at the fitted value (fit_error), with each subject predicted by a fit
-- that left it out (heldout_error), and at the textbook value (uncalibrated_error).
CREATE TABLE IF NOT EXISTS calibrations (
    constant           VARCHAR NOT NULL,   -- compute_scale, alpha_us, link_efficiency
    scope              VARCHAR NOT NULL,   -- gpu/precision (compute_scale) or a link id (collectives)
    value              DOUBLE NOT NULL,
    default_value      DOUBLE,             -- the textbook value it replaces
    unit               VARCHAR,
    n                  INTEGER NOT NULL,   -- subjects the fit used
    subject_kind       VARCHAR NOT NULL,   -- run or bench
    subject_ids        INTEGER[] NOT NULL,
    fit_error          DOUBLE,
    heldout_error      DOUBLE,
    uncalibrated_error DOUBLE,
    heldout            VARCHAR,            -- how subjects were left out: leave-one-out, k-fold over rows
    estimator          VARCHAR,            -- how the value was fitted
    fitted_at          TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (constant, scope)
);
