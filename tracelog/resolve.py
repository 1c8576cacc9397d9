"""Which hardware a file's runs and benches ran on, and who said so.

Each fact (GPU, GPUs per node, fabric, NICs per node) is decided per run and bench by the first source
that knows it, in this order:
1. `command line`: `--gpu`, `--gpus-per-node`, `--fabric` given with the ingest (or `tracelog set`);
2. `log`: the file itself: a bench's own device lines, a run's configuration (a lab note's node count),
   or lines nobody parsed that name the hardware (`hardware_lines`: nvidia-smi tables, device names,
   nccl-tests device lines, NCCL's `NET/IB` line: its NIC count, and Omni-Path by its driver name; the
   launcher's processes per node as the job script echoes them);
3. `bench`: a bench already in the store that ran on one of the same hosts (hosts from NCCL's line prefixes,
   DeepSpeed's world info, or the bench's device lines);
4. `cluster`: the first `[cluster.NAME]` of tracelog.toml whose host pattern or path glob matches.
The decided value goes in the run's or bench's column (where the model reads it) and the source, with
what decided it, in `run_hardware` / `bench_hardware` (the view `hardware_sources` holds both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracelog import hardware, hardware_lines
from tracelog.clusters import FACTS, Clusters
from tracelog.store import Store

RECORDED = (*FACTS, "nccl_network", "nccl_version")
"""What is recorded per run and bench: the facts the model reads (each a column), the transport NCCL
said it chose between nodes (recorded only, for the `nccl_socket_network` flag) and NCCL's release
(recorded only; the memory model counts NCCL's buffers for releases that allocate them at start)."""
SCAN_LIMIT = 5000
"""Unparsed lines with a hardware word read per file: nvidia-smi tables and NCCL's setup lines come
before training starts, so the first few thousand are enough and a long log costs no more."""

SCAN_SQL = f"""
WITH hits AS (
    SELECT line_no, text FROM unparsed
    WHERE source_id = $source AND line_no > $since AND ({" OR ".join(f"contains(text, '{w}')" for w in hardware_lines.SCAN_WORDS)})
    ORDER BY line_no LIMIT {SCAN_LIMIT}
)
-- each hit with the unparsed line after it (a GPU's name may follow its nvidia-smi header), by a join:
-- a list of the hits' next line numbers probed per row cost 0.7 s on a 350,000-line log
SELECT h.line_no, h.text, n.text AS next_text
FROM hits h LEFT JOIN unparsed n ON n.source_id = $source AND n.line_no = h.line_no + 1
ORDER BY h.line_no
"""
HOSTS_SQL = f"""
SELECT DISTINCT regexp_extract(text, '{hardware_lines.NCCL_LINE}', 1) AS host
FROM unparsed WHERE source_id = $source AND line_no > $since AND contains(text, '] NCCL ')
  AND regexp_matches(text, '{hardware_lines.NCCL_LINE}')
ORDER BY host LIMIT 1000
"""


@dataclass(frozen=True)
class Decided:
    value: Any
    source: str
    detail: str | None = None
    column: bool = True  # False: recorded, the column left as it was (a bench's printed GPU name stays)


def log_facts(store: Store, source_id: int, since: int = 0) -> tuple[dict[str, Decided], list[str]]:
    """What the file's unparsed lines after line `since` say: facts, and the hosts its NCCL lines name."""
    facts: dict[str, Decided] = {}
    hosts: dict[str, None] = {}
    hits = store.con.execute(SCAN_SQL, {"source": source_id, "since": since}).fetchall()
    for line_no, text, next_text in hits:
        world = hardware_lines.world_info(text)
        if world is not None:
            hosts.update(dict.fromkeys(world))
            per_node = set(world.values())
            if "gpus_per_node" not in facts and len(per_node) == 1:
                facts["gpus_per_node"] = Decided(
                    per_node.pop(), "log", f"line {line_no} (DeepSpeed world info)"
                )
        if "gpus_per_node" not in facts:
            launched = hardware_lines.launcher_gpus_per_node(text)
            if launched is not None:
                facts["gpus_per_node"] = Decided(launched, "log", f"line {line_no} (launcher)")
        if "gpu_model" not in facts:
            seen = hardware_lines.gpu_seen(int(line_no), text, next_text)
            if seen is not None:
                facts["gpu_model"] = Decided(seen.gpu.id, "log", f"line {line_no} ({seen.how})")
        if "nics_per_node" not in facts:
            nics = hardware_lines.nccl_nics(text)
            if nics is not None:
                facts["nics_per_node"] = Decided(nics, "log", f"line {line_no} (NCCL NET)")
        if "nccl_network" not in facts:
            network = hardware_lines.nccl_network(text)
            if network is not None:
                facts["nccl_network"] = Decided(network, "log", f"line {line_no} (NCCL)", column=False)
        if "nccl_version" not in facts:
            version = hardware_lines.nccl_version(text)
            if version is not None:
                facts["nccl_version"] = Decided(version, "log", f"line {line_no} (NCCL)", column=False)
        if "fabric" not in facts:
            named = hardware_lines.nccl_fabric(text)
            if named is not None:
                port, how = named
                facts["fabric"] = Decided(port, "log", f"line {line_no} (NCCL NET: {how})")
    hosts.update(
        (row[0], None)
        for row in store.con.execute(HOSTS_SQL, {"source": source_id, "since": since}).fetchall()
        if row[0]
    )
    return facts, list(hosts)


def bench_facts(store: Store, hosts: list[str], exclude: int | None = None) -> dict[str, Decided]:
    """Facts of the newest benches that ran on one of these hosts, each fact from the newest that has it."""
    if not hosts:
        return {}
    rows = store.con.execute(
        "SELECT bench_id, gpu_model, gpu_name, gpus_per_node, fabric, nics_per_node, "
        f"list_intersect(hosts, $hosts)[1] FROM {store.whole('benches')} "
        "WHERE len(list_intersect(hosts, $hosts)) > 0 AND bench_id IS DISTINCT FROM $exclude "
        "ORDER BY bench_id DESC",
        {"hosts": hosts, "exclude": exclude},
    ).fetchall()
    facts: dict[str, Decided] = {}
    for bench_id, gpu_model, gpu_name, per_node, fabric, nics, host in rows:
        gpu = hardware.gpu_for(gpu_model, gpu_name)
        values = {
            "gpu_model": gpu.id if gpu else None,
            "gpus_per_node": per_node,
            "fabric": fabric,
            "nics_per_node": nics,
        }
        for fact, value in values.items():
            if value is not None and fact not in facts:
                facts[fact] = Decided(value, "bench", f"bench {bench_id} on {host}")
    return facts


def cluster_facts(clusters: Clusters | None, path: str, hosts: list[str]) -> dict[str, Decided]:
    found = clusters.for_file(path, hosts) if clusters is not None else None
    if found is None:
        return {}
    cluster, why = found
    return {f: Decided(v, "cluster", f"{cluster.name} ({why})") for f, v in cluster.facts().items()}


def decide(layers: list[dict[str, Decided]]) -> dict[str, Decided]:
    """Per fact, the first layer that has it."""
    decided: dict[str, Decided] = {}
    for layer in layers:
        for fact, found in layer.items():
            if fact in RECORDED and fact not in decided:
                decided[fact] = found
    return decided


def _given(values: dict[str, Any]) -> dict[str, Decided]:
    return {f: Decided(v, "command line") for f, v in values.items() if v is not None and f in FACTS}


def _own(row: dict[str, Any], detail: str, recorded: dict[str, Decided] | None = None) -> dict[str, Decided]:
    """The facts the parser put in the row's columns; with `recorded` (a log that resumed after it grew:
    its columns already hold what was decided before), a column that holds a value decided by another
    source is not the log's."""
    recorded = recorded or {}
    own = {}
    for f in FACTS:
        if row.get(f) is None:
            continue
        before = recorded.get(f)
        if before is not None and before.value == str(row[f]):
            if before.source != "log":
                continue
            own[f] = before  # a line read before the log grew: its line number stays the detail
        else:
            own[f] = Decided(row[f], "log", detail)
    return own


def _recorded(store: Store, table: str, entity: int) -> dict[str, Decided]:
    facts_table, id_col = HARDWARE_TABLES[table]
    rows = store.con.execute(
        f"SELECT fact, value, source, detail FROM {facts_table} WHERE {id_col} = ?", [entity]
    ).fetchall()
    return {fact: Decided(value, source, detail) for fact, value, source, detail in rows}


def _read_before(recorded: dict[str, Decided]) -> dict[str, Decided]:
    """Recorded-only facts the log's lines said before it grew (a resumed ingest scans only the new ones)."""
    return {
        f: Decided(d.value, d.source, d.detail, column=False)
        for f, d in recorded.items()
        if f not in FACTS and d.source == "log"
    }


def _said(recorded: dict[str, Decided]) -> dict[str, Decided]:
    """What a user set earlier (`tracelog set`, `--gpu` on an earlier ingest of a log that grew since)."""
    return {f: d for f, d in recorded.items() if d.source == "command line"}


HARDWARE_TABLES = {"runs": ("run_hardware", "run_id"), "benches": ("bench_hardware", "bench_id")}


def _write(store: Store, table: str, entity: int, decided: dict[str, Decided]) -> None:
    facts_table, id_col = HARDWARE_TABLES[table]
    store.con.execute(f"DELETE FROM {facts_table} WHERE {id_col} = ?", [entity])
    columns = {f: d.value for f, d in decided.items() if d.column}
    if columns:
        sets = ", ".join(f'"{f}" = ?' for f in columns)
        store.con.execute(f"UPDATE {table} SET {sets} WHERE {id_col} = ?", [*columns.values(), entity])
    for fact in RECORDED:
        if fact in decided:
            d = decided[fact]
            store.con.execute(
                f"INSERT INTO {facts_table} VALUES (?, ?, ?, ?, ?)",
                [entity, fact, str(d.value), d.source, d.detail],
            )


def _records(store: Store, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    """Rows as dicts with SQL NULL as None (through pandas a NULL among strings would read as NaN, and a
    NaN is a value: it was written back as the GPU 'nan')."""
    cursor = store.con.execute(sql, params)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def resolve_source(
    store: Store,
    source_id: int,
    path: str,
    given: dict[str, Any],
    clusters: Clusters | None,
    since: int = 0,
) -> None:
    """Decide and record the hardware of every run and bench of one source (inside its transaction).
    `given` holds the command line's facts; the columns already hold what the parser read. `since`: a log
    that resumed after it grew scans only its lines after that one (what the lines before said is in the
    columns and recorded, and the hosts they named are kept), so growth costs what the new lines cost."""
    scanned, hosts = log_facts(store, source_id, since)
    for bench in _records(
        store,
        "SELECT bench_id, gpu_model, gpu_name, gpus_per_node, fabric, nics_per_node, hosts "
        "FROM benches WHERE source_id = ? ORDER BY bench_id",
        [source_id],
    ):
        recorded = _recorded(store, "benches", int(bench["bench_id"]))
        own = _own(bench, "the bench's own lines", recorded)
        printed = hardware.gpu_for(None, bench["gpu_name"])
        if "gpu_model" not in own and printed is not None:
            own["gpu_model"] = Decided(printed.id, "log", f"device lines: {bench['gpu_name']}", column=False)
        bench_hosts = [h for h in (bench["hosts"] if bench["hosts"] is not None else []) if h] or hosts
        layers = [
            _given(given),
            _said(recorded),
            own,
            scanned,
            _read_before(recorded),
            bench_facts(store, bench_hosts, int(bench["bench_id"])),
            cluster_facts(clusters, path, bench_hosts),
        ]
        _write(store, "benches", int(bench["bench_id"]), decide(layers))
    for run in _records(
        store,
        "SELECT r.run_id, r.gpu_model, r.gpus_per_node, r.fabric, r.nics_per_node, r.hosts, "
        "p.value AS world_info "
        "FROM runs r LEFT JOIN run_params p ON p.run_id = r.run_id AND p.name = 'world_info' "
        "WHERE r.source_id = ?",
        [source_id],
    ):
        run_id = int(run["run_id"])
        world = (
            hardware_lines.world_info(f"WORLD INFO DICT: {run['world_info']}") if run["world_info"] else None
        )
        named = [*(world or {})]  # then the NCCL hosts in order, the earlier lines' too when it resumed
        run_hosts = [*named, *sorted({*(run["hosts"] or []), *hosts} - set(named))]
        if run_hosts:
            store.con.execute("UPDATE runs SET hosts = ? WHERE run_id = ?", [run_hosts, run_id])
        recorded = _recorded(store, "runs", run_id)
        layers = [
            _given(given),
            _said(recorded),
            _own(run, "the log's configuration", recorded),
            scanned,
            _read_before(recorded),
            bench_facts(store, run_hosts),
            cluster_facts(clusters, path, run_hosts),
        ]
        _write(store, "runs", run_id, decide(layers))
    store.con.execute(
        "UPDATE runs SET gpus = coalesce(gpus, nodes * gpus_per_node) WHERE source_id = ?", [source_id]
    )


def record_set(store: Store, table: str, entity: int, values: dict[str, Any]) -> None:
    """`tracelog set` after the fact: the user's word, kept as `command line`."""
    facts_table, id_col = HARDWARE_TABLES[table]
    for fact, value in values.items():
        if fact in FACTS:
            store.con.execute(f"DELETE FROM {facts_table} WHERE {id_col} = ? AND fact = ?", [entity, fact])
            store.con.execute(
                f"INSERT INTO {facts_table} VALUES (?, ?, ?, 'command line', 'tracelog set')",
                [entity, fact, str(value)],
            )
