"""The `tracelog` command: parse options, call one library function, render the result.

`base` holds the group and what commands share; `logs` the commands over ingested logs and benches;
`model` the commands of the analytic model. Importing them registers their commands on the group.
"""

from tracelog.cli import logs, model
from tracelog.cli.base import cli

__all__ = ["cli", "logs", "main", "model"]


def main() -> None:
    cli(prog_name="tracelog")
