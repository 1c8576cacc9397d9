"""Benchmarks whose own check found the data wrong: nccl-tests' `#wrong` (or, before it, the largest error
and the footer's out-of-bounds count), and nvbandwidth's check of the copied pattern. A wrong value is a
hardware or driver fault, so these are critical whatever the bandwidth was."""

from __future__ import annotations

from tracelog.analysis.rules import Flag, bench_flag, size_text
from tracelog.analysis.scope import Scope
from tracelog.store import Store
from tracelog.thresholds import Thresholds

CORRUPTION_HINT = (
    "Data corruption is a hardware or driver fault, not a tuning matter: rerun on the same GPUs with "
    "-c 1, then test node by node and GPU pair by pair to isolate the bad GPU, NVLink or NIC."
)


def data_errors(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    rows = store.con.execute(
        f"""
        SELECT bench_id, sum(wrong), count(*), min(size_bytes), max(size_bytes), min(line_no)
        FROM collectives WHERE {scope.benches} AND wrong > 0 GROUP BY bench_id
        """
    ).fetchall()
    flags = [
        bench_flag(
            "nccl_data_error",
            "critical",
            bench_id,
            f"{int(wrong)} wrong values in {rows_bad} row(s), "
            + (
                f"at {size_text(size)}"
                if size == largest
                else f"from {size_text(size)} to {size_text(largest)}"
            )
            + ": the collective returned corrupted data.",
            CORRUPTION_HINT,
            row_ref=f"line {line}",
            measured=float(wrong),
            expected=0.0,
        )
        for bench_id, wrong, rows_bad, size, largest, line in rows
    ]
    # nccl-tests before the `#wrong` column (2019) printed each row's largest error and counted the rows
    # over its tolerance only in its footer, `# Out of bounds values : N FAILED`: the count is all there is.
    counted = store.con.execute(
        f"""
        SELECT b.bench_id, b.out_of_bounds, min(e.line_no) AS line,
               any_value(p.value) FILTER (p.name = 'max_error') AS max_error
        FROM benches b
        LEFT JOIN events e ON e.bench_id = b.bench_id AND e.kind = 'out_of_bounds'
        LEFT JOIN bench_params p ON p.bench_id = b.bench_id
        WHERE {scope.benches.replace("bench_id", "b.bench_id")} AND b.out_of_bounds > 0
          AND b.bench_id NOT IN (SELECT bench_id FROM collectives WHERE wrong > 0)
        GROUP BY b.bench_id, b.out_of_bounds
        """
    ).fetchall()
    for bench_id, out_of_bounds, line, max_error in counted:
        largest = f" (the largest error printed: {max_error})" if max_error is not None else ""
        flags.append(
            bench_flag(
                "nccl_data_error",
                "critical",
                bench_id,
                f"nccl-tests counted {int(out_of_bounds)} out-of-bounds result(s){largest}: the collective "
                "returned corrupted data.",
                CORRUPTION_HINT,
                row_ref=f"line {line}" if line is not None else None,
                measured=float(out_of_bounds),
                expected=0.0,
            )
        )
    # the same layout cut before its footer: its rows' largest error is all there is, held to the tolerance
    # nccl-tests held it to (`_error_tolerance`)
    uncounted = store.con.execute(
        f"""
        SELECT b.bench_id, b.dtype, try_cast(p.value AS DOUBLE) AS max_error, p.line_no
        FROM benches b JOIN bench_params p ON p.bench_id = b.bench_id AND p.name = 'max_error'
        WHERE {scope.benches.replace("bench_id", "b.bench_id")} AND b.out_of_bounds IS NULL
          AND b.bench_id NOT IN (SELECT bench_id FROM collectives WHERE wrong > 0)
        """
    ).fetchall()
    for bench_id, dtype, max_error, line in uncounted:
        if max_error is None or max_error <= _error_tolerance(dtype):
            continue
        flags.append(
            bench_flag(
                "nccl_data_error",
                "critical",
                bench_id,
                f"A row's error is {max_error:g}, over what nccl-tests tolerates for {dtype or 'float'} "
                f"({_error_tolerance(dtype):g}); the output stops before the footer that would count such rows: "
                "the collective returned corrupted data.",
                CORRUPTION_HINT,
                row_ref=f"line {line}",
                measured=float(max_error),
                expected=_error_tolerance(dtype),
            )
        )
    return flags


def _error_tolerance(dtype: str | None) -> float:
    """The largest error nccl-tests passed while it printed an `error` column (src/common.cu
    `DeltaMaxValue`): none for an integer type, 1e-12 for double, 1e-5 for float, 5e-2 for half (1e-2 in
    some versions: the larger is taken, so no row nccl-tests passed is called wrong)."""
    kind = (dtype or "float").split(",")[0].strip().lower()
    if kind.startswith(("int", "uint", "char")):
        return 0.0
    if kind in ("double", "float64"):
        return 1e-12
    return 5e-2 if kind in ("half", "bfloat16", "float16", "bf16", "fp16") else 1e-5


COPY_HINT = (
    "Data corruption is a hardware or driver fault, not a tuning matter: rerun that test alone (nvbandwidth -t "
    "<test>) to see whether it repeats, look for Xid and ECC or row-remapping errors on its GPUs (dmesg, "
    "nvidia-smi -q -d ECC,ROW_REMAPPER), then test GPU pair by pair to isolate the bad GPU or NVLink."
)


def copy_errors(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    """nvbandwidth's check of a copy (`memcmpPatternHelper`, unless `--skipVerification`) found a word
    that is not the pattern written: the copy returned corrupted data, and the tool stopped there."""
    rows = store.con.execute(
        f"""
        SELECT p.bench_id, p.value, min(e.line_no), list(e.text ORDER BY e.line_no)
        FROM bench_params p JOIN events e ON e.bench_id = p.bench_id AND e.kind = 'data_error'
        WHERE {scope.benches.replace("bench_id", "p.bench_id")} AND p.name = 'verification failed'
        GROUP BY ALL ORDER BY p.bench_id
        """
    ).fetchall()
    flags = []
    for bench_id, test, line, texts in rows:
        printed = [text for text in texts if not text.startswith("ASSERT")] or texts[:1]
        flags.append(
            bench_flag(
                "nvbandwidth_data_error",
                "critical",
                bench_id,
                f"nvbandwidth's check of the data copied by {test} failed ({'; '.join(printed)}): the copy "
                "returned corrupted data. The tool stops at a failed check, so the tests after it did not run.",
                COPY_HINT,
                row_ref=f"line {line}",
            )
        )
    return flags
