"""Which runs and benches a refresh looks at, as SQL predicates the rules splice into their queries."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scope:
    runs: str = "TRUE"  # predicate over a `run_id` column
    benches: str = "TRUE"  # predicate over a `bench_id` column
    # Every run and bench in scope was made in the current transaction (a new file's refresh inside its
    # own ingest, in a DuckLake store): nothing of theirs is stored to delete first, and in a DuckLake
    # store each DELETE is a round of catalog questions (six of them, 0.2 s of a 25 MB log's ingest).
    new: bool = False
    # The relation the rules read warm-up marks from: the `iteration_marks` view, which finds each run's
    # warm-up cut again for every query, or within a refresh a view over the cut found once for the runs
    # in scope (`refresh.found_marks`).
    marks: str = "iteration_marks"
    # Within a refresh, each run's buckets are brought up to date and its figures over its warm-up, steady
    # and other ranges made once, in temporary tables the rules read (`run_ranges.prepare`).
    prepared: bool = False

    @classmethod
    def of(
        cls, run_ids: list[int] | None = None, bench_ids: list[int] | None = None, new: bool = False
    ) -> Scope:
        def predicate(column: str, ids: list[int] | None) -> str:
            if ids is None:
                return "TRUE"
            return f"{column} IN ({', '.join(str(int(i)) for i in ids)})" if ids else "FALSE"

        return cls(predicate("run_id", run_ids), predicate("bench_id", bench_ids), new)

    @property
    def has_runs(self) -> bool:
        """Whether any run can be in scope: a refresh after a bench skips every query about runs (in a
        DuckLake store each is a round of catalog questions), and one after a training log every query
        about benches."""
        return self.runs != "FALSE"

    @property
    def has_benches(self) -> bool:
        return self.benches != "FALSE"
