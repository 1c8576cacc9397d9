"""The lab-note table parser on the shapes hand-kept experiment tables take: aliases, units, placeholders,
context lines above tables, prose around them, CSV exports, and the BigScience chronicles themselves."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SAMPLES, corpus_files, source_of
from tracelog import api, parsers
from tracelog.parsers import deepspeed, megatron, table
from tracelog.parsers.base import head_text
from tracelog.parsers.table_headers import column_of, parse_context, parse_count, parse_measure

# Header, rule and a row of the BigScience tr11 chronicles, verbatim (bigscience-workshop/bigscience,
# train/tr11-176B-ml/chronicles-prequel.md, lines 773, 774 and 776: the 181B model, 72 layers, on
# DP8 TP8 PP6 MBS4); tests below vary the row to show one parser feature each.
HEADER = "| Nodes | Size | DP | TP | PP | MBS |  GBS | Mem  | Sec/it | TFLOPs | Notes |"
RULE = "| ----: | ---: | -: | -: | -: | --: | ---: | ---: | -----: | -----: | ----: |"
BLOOM_ROW = "|    48 | 181B |  8 |  8 |  6 |   4 | 2048 | 55GB | 114.11 | 141.27 | 02-25 |"


def collect(text: str, name: str = "<test>") -> dict[str, list[dict]]:
    """All batches of a parse, concatenated per table, as lists of dicts."""
    out: dict[str, list[dict]] = {}
    source = source_of(text)
    source.name = name
    for batch in table.parse(source):
        rows = batch.rows.to_dicts() if isinstance(batch.rows, pl.DataFrame) else list(batch.rows)
        out.setdefault(batch.table, []).extend(rows)
    return out


def notes(title: str, *lines: str) -> str:
    return "\n".join([f"# {title}", "", *lines, ""])


def params_of(run: dict) -> dict[str, str]:
    return {p["name"]: p["value"] for p in run["run_params"]}


@pytest.mark.parametrize(
    "text",
    [
        notes("tr11-176B: topology", HEADER, RULE, BLOOM_ROW),
        # no outer pipes (GFM allows it)
        notes("tr11-176B", HEADER.strip("|"), RULE.strip("|"), BLOOM_ROW.strip("|")),
        # emphasis and a space between number and unit
        notes("tr11-176B", HEADER, RULE, BLOOM_ROW.replace("114.11", "**114.11**").replace("55GB", "55 GB")),
        # unit in the header instead of the cell, other spellings of the headers
        notes(
            "tr11-176B",
            "| Nodes | Model size | DP | TP | PP | Micro batch | Global batch | Mem (GB) | s/it | TFLOP/s/GPU | Notes |",
            RULE,
            BLOOM_ROW.replace("55GB", "55"),
        ),
    ],
    ids=["markdown", "no-outer-pipes", "markup", "aliases"],
)
def test_the_bloom_style_row_comes_out_with_exactly_its_numbers(text: str) -> None:
    out = collect(text)
    (run,) = out["runs"]
    assert run["name"] == "tr11-176B 48n dp8 tp8 pp6 mbs4"
    assert run["framework"] == "table"
    assert (run["nodes"], run["dp"], run["tp"], run["pp"], run["mbs"], run["gbs"]) == (48, 8, 8, 6, 4, 2048)
    assert run["params"] == 181_000_000_000
    assert run["gpus"] == 384
    assert params_of(run)["gpus_assumed_per_node"] == "8"
    assert run["line_start"] == run["line_end"] == 5
    (it,) = out["iterations"]
    assert (it["iteration"], it["elapsed_s"], it["tflops_reported"], it["line_no"]) == (0, 114.11, 141.27, 5)
    assert it["global_batch_size"] == 2048
    (mem,) = out["memory"]
    assert mem["max_reserved_mib"] == 55 * 1024
    assert run["status"] is None


@pytest.mark.parametrize(
    ("mem", "sec_it", "tflops", "status"),
    [
        ("OOM", "", "", "OOM"),
        ("OOM", "x", "x", "OOM"),
        ("61GB", "fail", "", "fail"),
        ("61GB", "xxxx", "xxxx", "xxxx"),
        ("GB", "92.75", "133.08", "GB"),
        ("", "92.75", "133.08", None),
    ],
)
def test_a_word_where_a_number_belongs_is_null_and_becomes_the_status(
    mem: str, sec_it: str, tflops: str, status: str | None
) -> None:
    # The chronicles' line 778 with its Mem, Sec/it and TFLOPs cells replaced.
    row = f"| 48 | 181B | 4 | 8 | 12 | 4 | 1568 | {mem} | {sec_it} | {tflops} | 02-25 |"
    out = collect(notes("t", HEADER, RULE, row))
    (run,) = out["runs"]
    assert run["status"] == status
    iterations = out.get("iterations", [])
    if sec_it.replace(".", "").isdigit():
        assert iterations[0]["elapsed_s"] == float(sec_it)
    else:
        assert iterations == []  # nothing measured: no iteration row, the run is still there
    assert bool(out.get("memory")) == (mem.endswith("GB") and mem != "GB")
    assert params_of(run)["Mem"] == mem  # every cell verbatim


def test_an_oom_row_is_a_run_with_null_measurements() -> None:
    db_rows = collect(notes("t", HEADER, RULE, "| 48 | 181B | 48 | 8 | 1 | 1 | 2016 | OOM |  |  | 02-25 |"))
    (run,) = db_rows["runs"]
    assert (run["status"], run["dp"], run["tp"], run["pp"]) == ("OOM", 48, 8, 1)
    assert "iterations" not in db_rows and "memory" not in db_rows


def test_context_lines_apply_to_the_table_below_only() -> None:
    text = notes(
        "t",
        "NHIDDEN=14336 / NLAYERS=72",
        "",
        HEADER,
        RULE,
        BLOOM_ROW,
        "",
        "Same again without the context line:",
        "",
        HEADER,
        RULE,
        BLOOM_ROW,
    )
    first, second = collect(text)["runs"]
    assert (first["hidden"], first["layers"]) == (14336, 72)
    assert (second.get("hidden"), second.get("layers")) == (None, None)
    assert params_of(first)["NHIDDEN"] == "14336"
    assert "NHIDDEN" not in params_of(second)


def test_cells_win_over_context_and_conflicting_context_is_not_applied() -> None:
    text = notes(
        "t",
        "20B model: TP=8, PP=1, NLAYERS=8, NHIDDEN=14400, GBS=2048",
        "200B model: TP=8, PP=10, NLAYERS=80, NHIDDEN=14400, GBS=2048",
        "",
        "| GPUs | Size | DP | TP | PP | MBS | Mem  | TFLOPs | Notes |",
        "| ---: | ---: | -: | -: | -: | --: | ---: | -----: | ----: |",
        "|    8 | 20B  |  1 |  8 |  1 |   1 | 67GB | 108.47 | 02-17 |",
        "|   80 | 200B |  1 |  8 | 10 |   1 | 73GB |  98.87 | 02-17 |",
    )
    small, large = collect(text)["runs"]
    assert (small["pp"], large["pp"]) == (1, 10)  # the cell, not the context
    assert small["hidden"] == large["hidden"] == 14400  # stated once: applied
    assert small.get("layers") is None and large.get("layers") is None  # 8 or 80: ambiguous, left NULL
    assert small["gbs"] == 2048
    assert (small["gpus"], small.get("nodes")) == (8, None)  # GPUs given: no per-node assumption
    assert "gpus_assumed_per_node" not in params_of(small)


@pytest.mark.parametrize(
    ("line", "fields"),
    [
        ("NHIDDEN=14336 / NLAYERS=72", {"hidden": "14336", "layers": "72"}),
        ("NHIDDEN=13312; NLAYERS=94 Model size: 203B, ratio=141", {"hidden": "13312", "layers": "94"}),
        ("all NHEADS=64 (above too)", {"heads": "64"}),
        ("SEQ_LEN=2048; VOCAB_SIZE=250880", {"seq_len": "2048", "vocab": "250880"}),
        ("So we have 2 set ups that fit 48 nodes - and that's PP=6/DP=8 or PP=12/DP=4", None),
        ("* DP=4, PP=12, MBS=4: 123 secs/it | 130 TFLOPS", None),
        ("NHEADS=108 breaks constraints for invoking the fused softmax kernel", None),
        ("* ZS = ZERO_STAGE", None),
        ("export CUDA_LAUNCH_BLOCKING=1", None),
    ],
)
def test_context_lines_are_assignments_and_prose_is_not(line: str, fields: dict[str, str] | None) -> None:
    parsed = parse_context(line)
    if fields is None:
        assert parsed is None
    else:
        assert parsed is not None
        assert {field: value for _, field, value in parsed if field} == fields


@pytest.mark.parametrize(
    ("header", "field", "unit"),
    [
        ("Sec/it", "elapsed_s", None),
        ("secs/it", "elapsed_s", None),
        ("Time/it (ms)", "elapsed_ms", "ms"),
        ("TFLOPs", "tflops", None),
        ("TFLOP/s/GPU", "tflops", None),
        ("Mem", "mem", None),
        ("Mem (GB)", "mem", "gb"),
        ("NHIDDEN", "hidden", None),
        ("NLAYERS", "layers", None),
        ("Layers", "layers", None),
        ("NHEADS", "heads", None),
        ("ZS", "zero_stage", None),
        ("Size", "params", None),
        ("GPUs", "gpus", None),
        ("Nodes", "nodes", None),
        ("micro_batch_size", "mbs", None),
        ("GBS", "gbs", None),
        ("Samples/s", "samples_per_s", None),
        ("Notes", "notes", None),
        ("Exp", "id", None),
        ("async", None, None),
    ],
)
def test_header_aliases(header: str, field: str | None, unit: str | None) -> None:
    column = column_of(header)
    assert (column.field, column.unit) == (field, unit)


@pytest.mark.parametrize(
    ("cell", "count"),
    [
        ("181B", 181 * 10**9),
        ("1.3B", 1_300_000_000),
        ("350M", 350_000_000),
        ("250k", 250_000),
        ("2048", 2048),
    ],
)
def test_sizes_with_units(cell: str, count: int) -> None:
    assert parse_count(cell) == count


@pytest.mark.parametrize(
    ("field", "cell", "unit", "value"),
    [
        ("mem", "55GB", None, 55 * 1024.0),
        ("mem", "55", "gb", 55 * 1024.0),
        ("mem", "70000MiB", None, 70000.0),
        ("elapsed_s", "1850ms", None, 1.85),
        ("elapsed_ms", "1850", "ms", 1.85),
        ("tflops", "~130", None, 130.0),
    ],
)
def test_measurements_in_the_unit_of_their_column(
    field: str, cell: str, unit: str | None, value: float
) -> None:
    assert parse_measure(field, cell, unit).value == pytest.approx(value)


def test_the_prose_around_a_table_becomes_the_notes_of_its_runs() -> None:
    text = notes(
        "t",
        "## Choosing the fastest topology",
        "",
        "Constraint: at most 48 nodes.",
        "",
        HEADER,
        RULE,
        BLOOM_ROW.replace("02-25", "too close to OOM"),
        "",
        "*Mem = max used on the first stage.",
        "",
        "## Next section",
        "",
        "Unrelated text.",
    )
    (run,) = collect(text)["runs"]
    assert run["notes"].startswith("too close to OOM")
    assert "## Choosing the fastest topology" in run["notes"]
    assert "Constraint: at most 48 nodes." in run["notes"]
    assert "*Mem = max used on the first stage." in run["notes"]
    assert "Unrelated text." not in run["notes"]
    assert params_of(run)["section"] == "Choosing the fastest topology"


def test_a_column_that_varies_within_a_table_names_its_runs() -> None:
    # The chronicles' lines 944, 945, 947 and 948 (the final 176B model, 02-28), verbatim.
    header = "| Nodes | Size | DP | TP | PP | MBS | NHEADS |  GBS | Mem  | Sec/it | TFLOPs | Notes |"
    rule = "| ----: | ---: | -: | -: | -: | --: | -----: |  --: | ---: | -----: | -----: | ----: |"
    rows = [
        "|    48 | 176B |  8 |  4 | 12 |   2 |     64 | 2048 | 59GB | 102.03 | 153.68 | 02-28 |",
        "|    48 | 176B |  8 |  4 | 12 |   2 |    112 | 2048 | 59GB | 104.50 | 150.05 | 02-28 |",
    ]
    names = [r["name"] for r in collect(notes("tr11-176B", header, rule, *rows))["runs"]]
    assert names == ["tr11-176B 48n dp8 tp4 pp12 mbs2 nh64", "tr11-176B 48n dp8 tp4 pp12 mbs2 nh112"]


def test_a_row_with_more_cells_than_its_header_is_unparsed_and_prose_is_not() -> None:
    text = notes("t", "Some prose.", "", HEADER, RULE, BLOOM_ROW, BLOOM_ROW + " 7 | extra |")
    out = collect(text)
    assert len(out["runs"]) == 1
    assert [u["line_no"] for u in out["unparsed"]] == [8]


def test_a_table_that_is_not_an_experiment_table_stays_notes() -> None:
    catalogue = [
        "| origin | size | layers | hidden |",
        "| ------ | ---: | -----: | -----: |",
        "| gpt3   | 175B |     96 |  12288 |",
    ]
    out = collect(notes("t", *catalogue, "", HEADER, RULE, BLOOM_ROW))
    (run,) = out["runs"]
    assert "| gpt3   | 175B |     96 |  12288 |" in run["notes"]
    assert "unparsed" not in out


def test_a_precision_heading_applies_to_the_tables_of_its_section() -> None:
    text = notes("t", "### bf16", "", HEADER, RULE, BLOOM_ROW, "", "### fp16", "", HEADER, RULE, BLOOM_ROW)
    assert [r["precision"] for r in collect(text)["runs"]] == ["bf16", "fp16"]


def test_csv_with_comment_context_and_quoted_notes() -> None:
    text = "\n".join(
        [
            "# NHIDDEN=14336 / NLAYERS=72",
            "Nodes,Size,DP,TP,PP,MBS,GBS,Mem (GB),Sec/it,TFLOPs,Notes",
            '48,181B,8,8,6,4,2048,55,114.11,141.27,"full batch, same as above"',
            "48,181B,48,8,1,1,2016,OOM,,,",
        ]
    )
    out = collect(text, name="sweeps/gbs_sweep.csv")
    ok, oom = out["runs"]
    assert ok["name"] == "gbs_sweep 48n dp8 tp8 pp6 mbs4 gbs2048"  # GBS differs between the rows
    assert (ok["hidden"], ok["layers"]) == (14336, 72)
    assert ok["notes"].startswith("full batch, same as above")
    assert oom["status"] == "OOM"
    assert out["memory"] == [{"run_key": 0, "iteration": 0, "max_reserved_mib": 55 * 1024.0, "line_no": 3}]


@pytest.mark.parametrize(
    "head",
    [
        "# Notes\n\nNo tables here, only prose about NHIDDEN=14336.\n",
        "# Models\n\n| origin | size | layers | hidden |\n| --- | --- | --- | --- |\n| gpt3 | 175B | 96 | 12288 |\n",
        "| a | b |\n|---|---|\n| 1 | 2 |\n",
    ],
    ids=["prose", "catalogue-table", "unrelated-table"],
)
def test_markdown_without_an_experiment_table_is_not_a_table_file(head: str) -> None:
    assert table.detect(head) == 0


@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        ("lab_notes_tr11_topology.md", "table"),
        ("lab_notes_gbs_sweep.csv", "table"),
        ("megatron_deepspeed_bloom_ugly.log", "megatron"),
        ("deepspeed_zero2_gpt2_1b3.log", "deepspeed"),
    ],
)
def test_detection_picks_the_right_parser(sample: str, expected: str) -> None:
    head = head_text((SAMPLES / sample).read_bytes()[: parsers.HEAD_BYTES])
    chosen = parsers.detect(head, sample).FORMAT
    assert chosen == expected
    if expected != "table":
        assert table.detect(head) == 0


def test_lab_notes_quoting_megatron_iteration_lines_stay_table_files() -> None:
    line = (  # the chronicles' line 367, verbatim
        " iteration        2/   95367 | consumed samples:         4096 | consumed tokens:      8388608 | elapsed "
        "time per iteration (s): 769.99 | learning rate: 3.787E-06 | global batch size:  2048 | lm loss: "
        "6.384045E+01 | loss scale: 4096.0 | grad norm: 15906.210 | num zeros: 0.0 | number of skipped "
        "iterations:   0 | number of nan iterations:   0 | samples per second: 2.660 | TFLOPs: 108.47 |"
    )
    head = notes("t", "```", line, "```", "", HEADER, RULE, BLOOM_ROW)
    assert table.detect(head) > megatron.detect(head) > 0
    assert deepspeed.detect(head) == 0


# ---- the public chronicles -------------------------------------------------------------------------

EXPERIMENT_HEADER = re.compile(r"sec/it|tflops|\bmem\b|^\|\s*exp\s*\|", re.IGNORECASE)


def count_experiment_rows(text: str) -> int:
    """Data rows of experiment tables, counted without the parser: a `|` line followed by a `---` line
    whose header names a measurement (Sec/it, TFLOPs, Mem) or an experiment column; rows with any text."""
    lines = text.split("\n")
    count, i, in_code = 0, 0, False
    while i < len(lines) - 1:
        line = lines[i]
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and line.lstrip().startswith("|") and set(lines[i + 1].strip()) <= set("|:- "):
            header_is_experiment = bool(EXPERIMENT_HEADER.search(line))
            i += 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                if header_is_experiment and lines[i].replace("|", "").strip():
                    count += 1
                i += 1
            continue
        i += 1
    return count


CORPUS = corpus_files("table")


@pytest.mark.skipif(not CORPUS, reason="the shared corpus folder (shared/corpus/table) is not present")
@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_every_data_row_of_the_chronicles_is_one_run(path: Path) -> None:
    text = path.read_text()
    expected = count_experiment_rows(text)
    assert expected > 0
    assert table.detect(text[:65536]) > megatron.detect(text[:65536])
    out = collect(text, name=str(path))
    assert len(out["runs"]) == expected
    assert "unparsed" not in out


@pytest.mark.skipif(not CORPUS, reason="the shared corpus folder (shared/corpus/table) is not present")
def test_the_chronicles_gbs_table_keeps_its_figures() -> None:
    path = next((p for p in CORPUS if "tr11" in p.name), None)
    if path is None:
        pytest.skip("the tr11 chronicles are not in the corpus")
    out = collect(path.read_text(), name=str(path))
    runs = {r["line_start"]: r for r in out["runs"]}
    iterations = {i["line_no"]: i for i in out["iterations"]}
    row = next(n for n, line in enumerate(path.read_text().split("\n"), 1) if "| 114.11 | 141.27 |" in line)
    assert (runs[row]["dp"], runs[row]["tp"], runs[row]["pp"], runs[row]["mbs"]) == (8, 8, 6, 4)
    assert (runs[row]["hidden"], runs[row]["layers"], runs[row]["heads"]) == (14336, 72, 64)
    assert (iterations[row]["elapsed_s"], iterations[row]["tflops_reported"]) == (114.11, 141.27)
    assert sum(r["status"] == "OOM" for r in out["runs"]) >= 3


# ---- through the library ---------------------------------------------------------------------------


def test_lab_notes_land_in_the_database(tmp_path: Path) -> None:
    # The sample is excerpts of the tr11 chronicles, verbatim: every experiment row is a run.
    path = SAMPLES / "lab_notes_tr11_topology.md"
    db = tmp_path / "t.duckdb"
    results = api.ingest(db, [str(path)])
    assert [r.format for r in results] == ["table"]
    source = api.sql(db, "SELECT lines_total, lines_unparsed FROM sources").iloc[0]
    assert source["lines_unparsed"] == 0
    assert api.sql(db, "SELECT count(*) FROM runs").iloc[0, 0] == count_experiment_rows(path.read_text())
    # The final BLOOM-176B layout, chronicles line 948: 104.50 s/it, 150.05 TFLOPs, 59GB.
    row = api.sql(
        db,
        "SELECT r.name, r.nodes, r.gpus, r.dp, r.tp, r.pp, r.mbs, r.gbs, r.hidden, r.layers, r.heads, "
        "s.sec_per_it, s.tflops_reported, s.peak_reserved_mib "
        "FROM runs r JOIN run_summary s USING (run_id) WHERE r.name = 'tr11-176B 48n dp8 tp4 pp12 mbs2 nh112'",
    ).iloc[0]
    assert tuple(row[["nodes", "gpus", "dp", "tp", "pp", "mbs", "gbs"]]) == (48, 384, 8, 4, 12, 2, 2048)
    assert tuple(row[["hidden", "layers", "heads"]]) == (14336, 70, 112)
    assert (row["sec_per_it"], row["tflops_reported"], row["peak_reserved_mib"]) == (
        104.50,
        150.05,
        59 * 1024,
    )
    statuses = api.sql(
        db,
        "SELECT r.status, count(*) AS n, count(s.sec_per_it) AS timed, count(s.iterations_logged) AS logged "
        "FROM runs r JOIN run_summary s USING (run_id) WHERE r.status IS NOT NULL GROUP BY 1 ORDER BY 1",
    )
    # Three OOM rows (lines 793, 917, 918) and one xxxx (line 457); `GB` is a Mem placeholder only.
    oom = statuses.set_index("status").loc["OOM"]
    assert (oom["n"], oom["timed"], oom["logged"]) == (3, 0, 0)  # NULL: nothing measured
    assert statuses.set_index("status").loc["xxxx", "n"] == 1
    fp16 = api.sql(db, "SELECT count(*) FROM runs WHERE precision = 'fp16'").iloc[0, 0]
    assert fp16 == 3  # the table under `### fp16` (lines 387-391)
    cells = api.sql(
        db,
        "SELECT p.value FROM run_params p JOIN runs r USING (run_id) "
        "WHERE r.name = 'tr11-176B 48n dp8 tp4 pp12 mbs2 nh112' AND p.name = 'Mem'",
    )
    assert cells["value"].tolist() == ["59GB"]


def test_a_csv_export_lands_in_the_database(tmp_path: Path) -> None:
    # The GBS Variations table of the tr11 chronicles (lines 775-781) and one OOM row (793), as CSV.
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(SAMPLES / "lab_notes_gbs_sweep.csv")])
    rows = api.sql(
        db,
        "SELECT r.gbs, r.layers, r.status, i.elapsed_s, i.tflops_reported, m.max_reserved_mib FROM runs r "
        "LEFT JOIN iterations i USING (run_id) LEFT JOIN memory m USING (run_id) ORDER BY r.run_id",
    )
    assert rows["gbs"].tolist() == [1568, 2048, 2016, 1568, 2048, 1568, 2048, 2016]
    assert set(rows["layers"]) == {72}  # the `# NLAYERS=72` comment line
    assert rows["elapsed_s"].tolist()[:3] == [113.01, 114.11, 123.57]
    assert rows["tflops_reported"].tolist()[1] == 141.27
    assert rows["max_reserved_mib"].tolist()[1] == 55 * 1024
    assert rows["status"].tolist()[3] == "GB" and pd.isna(rows["max_reserved_mib"].tolist()[3])
    assert rows["status"].tolist()[-1] == "OOM" and pd.isna(rows["elapsed_s"].tolist()[-1])


# ---- hostile input ---------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [HEADER, RULE, BLOOM_ROW, "NHIDDEN=1 / NLAYERS=2", "```", "# h", "", "|", "| | |"]
            ),
            st.text(alphabet="|-: #=xGB0123456789\t,", max_size=40),
        ),
        max_size=30,
    )
)
def test_any_mix_of_table_fragments_parses_without_error(lines: list[str]) -> None:
    out = collect("\n".join(lines))
    for run in out.get("runs", []):
        assert run["line_start"] >= 1


def test_a_file_without_an_experiment_table_keeps_every_line_as_unparsed(tmp_path: Path) -> None:
    """`--parser table` named for another tool's output (invented lines in torchtitan's shape): no table,
    so nothing was read, and every line lands in `unparsed` with the ingest's warning, as the other
    parsers do, instead of counting as read and vanishing."""
    log = tmp_path / "titan.log"
    lines = [
        f"[rank0]:[titan] 2026-05-18 16:04:{46 + k},338 - root - INFO - step: {14 + k}  loss:  3.2{k}405  "
        "memory:  9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%"
        for k in range(5)
    ] + ["", "# a heading, not a table", "| not | an | experiment |"]
    log.write_text("\n".join(lines) + "\n")
    (result,) = api.ingest(tmp_path / "t.duckdb", [str(log)], parser="table")
    assert (result.runs, result.lines_total, result.lines_unparsed) == (0, 8, 7)
    kept = api.sql(tmp_path / "t.duckdb", "SELECT line_no, text FROM unparsed ORDER BY line_no")
    assert kept["line_no"].tolist() == [1, 2, 3, 4, 5, 7, 8] and kept["text"][0] == lines[0]
