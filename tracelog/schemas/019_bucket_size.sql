-- tracelog schema, version 19: buckets of 16,384 line numbers instead of 65,536
-- (tracelog/analysis/run_buckets.py, `BUCKET_LINES`): the refresh after a log grew reads the lines of the
-- buckets its ranges cut, and smaller buckets are fewer lines to read.
--
-- What schema 017's tables keep was summed at the old size: it goes, with the progress row that says how
-- far a run was summed, so that the next refresh of each run sums it again from its first line. The
-- steady-state figures kept in run_steady_cache do not depend on the size and stay.
-- Applying it twice (a version row lost) only costs one more summing.
DELETE FROM iteration_value_sums;
DELETE FROM iteration_values;
DELETE FROM iteration_buckets;
DELETE FROM run_progress WHERE rule = 'buckets';
