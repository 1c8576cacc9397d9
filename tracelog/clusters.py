"""Cluster facts said once: `[cluster.NAME]` sections of a `tracelog.toml`, so the GPU, GPUs per node,
fabric and NICs per node of a machine are written down one time instead of typed with every ingest.

    [cluster.jean-zay-a100]
    gpu = "a100-sxm4-80gb"          # a catalog id or the name tools print, checked against the catalog
    gpus_per_node = 8
    fabric = "ib-hdr-x4"            # a catalog link id
    nics_per_node = 4
    hosts = ["jean-zay-iam*"]       # fnmatch patterns over the host names a log or bench prints
    paths = ["*tr11*", "bloom/*"]   # fnmatch globs over the file's path relative to this file's folder

Where files are looked up, first found first: the folder of each ingested file and its ancestors
(nearest first), then the folder of the database, then the user's config folder
(`$XDG_CONFIG_HOME/tracelog/tracelog.toml`, `~/.config/tracelog/tracelog.toml` without it). A cluster
name defined twice keeps its first definition; a file or host matched by two clusters takes the first.
"""

from __future__ import annotations

import fnmatch
import json
import os
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracelog import hardware
from tracelog.errors import TracelogError
from tracelog.locations import config_folder

CONFIG_NAME = "tracelog.toml"
FACTS = ("gpu_model", "gpus_per_node", "fabric", "nics_per_node")
"""The hardware facts resolved per run and bench, in the order `tracelog show` lists them."""


@dataclass(frozen=True)
class Cluster:
    name: str
    config: str  # the tracelog.toml it came from
    gpu_model: str | None = None
    gpus_per_node: int | None = None
    fabric: str | None = None
    nics_per_node: int | None = None
    hosts: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()

    def facts(self) -> dict[str, Any]:
        return {fact: getattr(self, fact) for fact in FACTS if getattr(self, fact) is not None}

    def matches_host(self, hosts: list[str]) -> str | None:
        """The first host a pattern matches, or None."""
        for host in hosts:
            if any(fnmatch.fnmatchcase(host.casefold(), p.casefold()) for p in self.hosts):
                return host
        return None

    def matches_path(self, path: str) -> str | None:
        """The glob matching the file's path relative to this config's folder (or its name), or None."""
        if path == "-" or not self.paths:
            return None
        absolute = Path(path).resolve()
        try:
            relative = absolute.relative_to(Path(self.config).resolve().parent).as_posix()
        except ValueError:
            relative = absolute.as_posix()
        for glob in self.paths:
            if fnmatch.fnmatch(relative, glob) or fnmatch.fnmatch(absolute.name, glob):
                return glob
        return None


@dataclass
class Clusters:
    found: list[Cluster] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def for_file(self, path: str, hosts: list[str]) -> tuple[Cluster, str] | None:
        """The cluster a file belongs to, and what matched (`host NAME` or `path GLOB`)."""
        for cluster in self.found:
            host = cluster.matches_host(hosts)
            if host is not None:
                return cluster, f"host {host}"
            glob = cluster.matches_path(path)
            if glob is not None:
                return cluster, f"path {glob}"
        return None


def user_config() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "tracelog" / CONFIG_NAME


def config_files(db: str | None, paths: Sequence[str] = (), data: str | None = None) -> list[Path]:
    """Every tracelog.toml that applies, in the order of the module docstring, each once."""
    candidates: list[Path] = []
    for path in paths:
        if path == "-":
            continue
        here = Path(path).resolve()
        folder = here if here.is_dir() else here.parent
        candidates.extend(d / CONFIG_NAME for d in (folder, *folder.parents))
    if db and db != ":memory:":
        folder_of_db = config_folder(str(db), data)
        if folder_of_db is not None:
            candidates.append(folder_of_db / CONFIG_NAME)
    candidates.append(user_config())
    seen: dict[Path, None] = {}
    for candidate in candidates:
        if candidate not in seen and candidate.is_file():
            seen[candidate] = None
    return list(seen)


def _int_fact(raw: dict[str, Any], key: str, where: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise TracelogError(f"{key} must be a positive integer, not {value!r}", where)
    return value


def _patterns(raw: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = raw.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TracelogError(f"{key} must be a list of patterns", where)
    return tuple(value)


def parse_cluster(name: str, raw: dict[str, Any], config: str) -> Cluster:
    """One `[cluster.NAME]` section, its GPU and fabric checked against the catalog."""
    where = f"{config} [cluster.{name}]"
    if not isinstance(raw, dict):
        raise TracelogError("a cluster is a table of keys", where)
    unknown = set(raw) - {"gpu", "gpus_per_node", "fabric", "nics_per_node", "hosts", "paths"}
    if unknown:
        raise TracelogError(f"unknown keys {', '.join(sorted(unknown))}", where)
    try:
        gpu = hardware.resolve_gpu_id(str(raw["gpu"])) if raw.get("gpu") else None
        fabric = hardware.link(str(raw["fabric"])).id if raw.get("fabric") else None
    except TracelogError as exc:
        raise TracelogError(exc.message, where) from None
    return Cluster(
        name=name,
        config=config,
        gpu_model=gpu,
        gpus_per_node=_int_fact(raw, "gpus_per_node", where),
        fabric=fabric,
        nics_per_node=_int_fact(raw, "nics_per_node", where),
        hosts=_patterns(raw, "hosts", where),
        paths=_patterns(raw, "paths", where),
    )


def read_config(path: Path) -> list[Cluster]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TracelogError(f"not valid TOML: {exc}", str(path)) from None
    sections = data.get("cluster", {})
    if not isinstance(sections, dict):
        raise TracelogError("[cluster] must hold [cluster.NAME] sections", str(path))
    return [parse_cluster(name, raw, str(path)) for name, raw in sections.items()]


def load(db: str | None, paths: Sequence[str] = (), data: str | None = None) -> Clusters:
    """The clusters of every tracelog.toml that applies to these files and this database."""
    result = Clusters()
    names: set[str] = set()
    for config in config_files(db, list(paths), data):
        result.files.append(str(config))
        for cluster in read_config(config):
            if cluster.name not in names:
                names.add(cluster.name)
                result.found.append(cluster)
    return result


def _section_bounds(lines: list[str], name: str) -> tuple[int, int] | None:
    headers = {f"[cluster.{name}]", f'[cluster."{name}"]'}
    for start, line in enumerate(lines):
        if line.strip() in headers:
            end = start + 1
            while end < len(lines) and not lines[end].lstrip().startswith("["):
                end += 1
            return start, end
    return None


def section_text(cluster: Cluster) -> str:
    """The TOML of one cluster (JSON strings are valid TOML basic strings)."""
    key = cluster.name if all(c.isalnum() or c in "-_" for c in cluster.name) else json.dumps(cluster.name)
    out = [f"[cluster.{key}]"]
    gpu = {"gpu": cluster.gpu_model}
    for k, v in {**gpu, **{f: getattr(cluster, f) for f in FACTS[1:]}}.items():
        if v is not None:
            out.append(f"{k} = {json.dumps(v)}")
    for k in ("hosts", "paths"):
        if getattr(cluster, k):
            out.append(f"{k} = {json.dumps(list(getattr(cluster, k)))}")
    return "\n".join(out) + "\n"


def write_cluster(config: Path, cluster: Cluster) -> None:
    """Add or replace one section, keeping the rest of the file (comments included) as it was."""
    parse_cluster(cluster.name, tomllib.loads(section_text(cluster))["cluster"][cluster.name], str(config))
    lines = config.read_text(encoding="utf-8").splitlines(keepends=True) if config.exists() else []
    bounds = _section_bounds(lines, cluster.name)
    if bounds is not None:
        del lines[bounds[0] : bounds[1]]
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    if lines and lines[-1].strip():
        lines.append("\n")
    lines.append(section_text(cluster))
    config.write_text("".join(lines), encoding="utf-8")


def remove_cluster(config: Path, name: str) -> None:
    lines = config.read_text(encoding="utf-8").splitlines(keepends=True) if config.exists() else []
    bounds = _section_bounds(lines, name)
    if bounds is None:
        raise TracelogError(f"no cluster {name!r} in this file", str(config))
    del lines[bounds[0] : bounds[1]]
    config.write_text("".join(lines), encoding="utf-8")
