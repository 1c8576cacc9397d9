"""What a store's address names: an embedded DuckDB file, or a shared DuckLake store (`ducklake:...`, see
`store.lake`), and the folder each keeps its tracelog.toml in. Below the store, so that the cluster
lookup can ask without opening anything."""

from __future__ import annotations

import os
from pathlib import Path

LAKE_PREFIX = "ducklake:"
DATA_PATH_ENVVAR = "TRACELOG_DATA_PATH"


def is_lake(db: str | os.PathLike[str] | None) -> bool:
    return isinstance(db, str) and db.startswith(LAKE_PREFIX)


def lake_catalog_file(db: str) -> str | None:
    """The local file a DuckLake store keeps its catalog in (`ducklake:/shared/tracelog.ducklake`, a
    DuckDB file); None for a catalog on a server (`ducklake:postgres:...`), which only attaching can ask."""
    catalog = db[len(LAKE_PREFIX) :]
    return None if ":" in catalog.split("/", 1)[0] else catalog


def data_path(given: str | None = None) -> str | None:
    """A DuckLake store's data folder: given, or from the environment."""
    return given or os.environ.get(DATA_PATH_ENVVAR) or None


def config_folder(db: str, data: str | None = None) -> Path | None:
    """Where a store's tracelog.toml lives: an embedded file's folder, a DuckLake store's data folder
    (`data`, the one the open store knows, or the environment's; shared by everyone who writes it; None
    where it is not a local path, or not known)."""
    if not is_lake(db):
        return Path(db).resolve().parent
    folder = data_path(data)
    return Path(folder) if folder and "://" not in folder else None
