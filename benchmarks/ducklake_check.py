"""Can this Python's duckdb hold tracelog's schema in a DuckLake store, offline? (README: Shared store.)

Run it in an environment with `duckdb`, `duckdb-extension-ducklake` and `duckdb-extension-postgres` of
one version (`pip install duckdb==1.5.5 duckdb-extension-ducklake==1.5.5 duckdb-extension-postgres==1.5.5`):
it loads both extensions from their wheels by path (auto-install and auto-load off: nothing is
downloaded), attaches a DuckLake store with a DuckDB-file catalog in a temporary folder, applies every
schema file with what DuckLake refuses stripped (sequences, primary keys), and prints what still fails.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tempfile
from pathlib import Path

import duckdb

from tracelog.store import CONNECT_CONFIG, migrations


def extension_file(package: str, name: str) -> Path | None:
    """The `.duckdb_extension` a `duckdb-extension-*` wheel ships (`<package>/extensions/v<ver>/`)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None
    found = sorted(Path(spec.origin).parent.glob(f"extensions/*/{name}.duckdb_extension"))
    return found[-1] if found else None


def without_keys(sql: str) -> str:
    """A schema file with the sequences and primary keys DuckLake does not have taken out."""
    sql = re.sub(r"CREATE SEQUENCE[^;]*;", "", sql)
    sql = re.sub(r"DEFAULT nextval\('\w+'\)", "", sql)
    sql = re.sub(r",\s*PRIMARY KEY \([^)]*\)", "", sql)
    return sql.replace("PRIMARY KEY", "")


def main() -> int:
    print(f"duckdb {duckdb.__version__}")
    con = duckdb.connect(config=CONNECT_CONFIG)
    for package, name in (
        ("duckdb_extension_ducklake", "ducklake"),
        ("duckdb_extension_postgres", "postgres"),
    ):
        path = extension_file(package, name)
        if path is None:
            print(f"{package}: not installed")
            return 1
        # The postgres wheel names its file postgres, its entry point is postgres_scanner's: load a copy
        # under the extension's own name.
        version = path.parent.name
        if name == "postgres":
            copy = Path(tempfile.mkdtemp()) / "postgres_scanner.duckdb_extension"
            copy.write_bytes(path.read_bytes())
            path = copy
        try:
            con.execute(f"LOAD '{path}'")
            print(f"{name}: {version} loaded")
        except duckdb.Error as exc:
            print(f"{name}: {str(exc).splitlines()[0]}")
            return 1
    folder = Path(tempfile.mkdtemp())
    con.execute(f"ATTACH 'ducklake:{folder}/catalog.ducklake' AS lake (DATA_PATH '{folder}/data')")
    con.execute("USE lake")
    failed = 0
    for _, name, sql in migrations():
        try:
            con.execute(without_keys(sql))
            print(f"{name}: ok")
        except duckdb.Error as exc:
            failed += 1
            print(f"{name}: {str(exc).splitlines()[0]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
