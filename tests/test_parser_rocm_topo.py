"""`rocm-smi --showtopo`: the link-type matrix as links, weights and hops and NUMA nodes as bench params,
the host from the prompt, a cut output as a partial bench with a flag in rocm-smi's terms."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SAMPLES, rows_by_table
from tracelog import api, parsers
from tracelog.parsers import rocm_topo
from tracelog.parsers.base import head_text

SAMPLE = SAMPLES / "rocm_smi_showtopo_8xmi250x.txt"


def test_the_sample_is_detected_as_rocm_smi_and_not_as_nvidia_smi() -> None:
    head = head_text(SAMPLE.read_bytes()[: parsers.HEAD_BYTES])
    assert parsers.detect(head, SAMPLE.name) is rocm_topo
    assert parsers.by_format("topo").detect(head) == 0


def test_the_sample_lands_as_one_complete_bench_with_every_link(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(SAMPLE)])
    assert (result.format, result.lines_unparsed) == ("rocm_topo", 0)
    bench = api.sql(db, "SELECT tool, ranks, nodes, gpus_per_node, hosts, status FROM benches").iloc[0]
    assert tuple(bench)[:4] == ("rocm-smi-topo", 8, 1, 8)
    assert list(bench.hosts) == ["mi250x-node-02"] and bench.status == "complete"
    links = api.sql(db, "SELECT link_kind, count(*) AS n FROM links GROUP BY 1 ORDER BY 1")
    assert links.values.tolist() == [["X", 8], ["XGMI", 56]]
    params = dict(api.sql(db, "SELECT name, value FROM bench_params").values.tolist())
    # the sample's rows: `GPU0   0   15   15   15   30   30   15   15` (weights), hops 1 or 2
    assert (params["GPU0 GPU1 weight"], params["GPU0 GPU4 weight"]) == ("15", "30")
    assert (params["GPU0 GPU1 hops"], params["GPU0 GPU4 hops"]) == ("1", "2")
    assert (params["GPU0 NUMA Node"], params["GPU7 NUMA Affinity"]) == ("3", "0")
    assert api.sql(db, "SELECT count(*) AS n FROM flags").n[0] == 0


def test_a_cut_output_is_partial_and_says_which_rows_are_missing(tmp_path: Path) -> None:
    lines = SAMPLE.read_text().splitlines()
    cut = [*lines[: lines.index(next(x for x in lines if x.startswith("GPU5") and "XGMI" in x))],
           "WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status"]  # fmt: skip
    log = tmp_path / "cut.txt"
    log.write_text("\n".join(cut) + "\n")
    out = rows_by_table(rocm_topo.parse, log.read_text())
    assert [e["kind"] for e in out["events"]] == ["warning"]
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    assert api.sql(db, "SELECT status FROM benches").status[0] == "partial"
    (flag,) = api.sql(db, "SELECT message, hint FROM flags").itertuples(index=False)
    assert "link-type rows missing for GPU5, GPU6, GPU7 of the 8 GPUs" in flag.message
    assert "rocm-smi --showtopo" in flag.hint
