"""The `tracelog` command: parse options, call one library function, render the result.

`base` holds the group and what commands share; `logs` the commands over ingested logs and benches;
`model` the commands of the analytic model; `clusters` the cluster facts of tracelog.toml. Importing them registers their commands on the group.
"""

from tracelog.cli import clusters, logs, model
from tracelog.cli.base import accept_db_everywhere, cli

__all__ = ["cli", "clusters", "logs", "main", "model"]

accept_db_everywhere(cli)


def main() -> None:
    cli(prog_name="tracelog")
