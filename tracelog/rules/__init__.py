"""Flag rules, one module per family. Each rule reads the store and returns flag rows (dicts) with
rule, severity, subject_kind, subject_id, row_ref, measured, expected, ratio, message and hint."""
