-- Which formula a comparison's predicted figure comes from: a TFLOP/s figure is only comparable with
-- the formula that produced it (see tracelog/predict.py for the names).
ALTER TABLE comparisons ADD COLUMN formula VARCHAR;
