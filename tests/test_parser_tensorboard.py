"""TensorBoard event files as Megatron-LM, NeMo and TensorFlow write them: scalars into iterations,
timers, memory and metrics, arguments into the run's configuration; damaged files keep their good
records; a run's text log and its events make one run."""

from __future__ import annotations

import importlib.util
import io
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.util import tensor_util

from tests.conftest import ROOT, SAMPLES
from tests.tensorboard_events import scalar, text, write
from tracelog import api
from tracelog.errors import TracelogError
from tracelog.ingest import IngestResult, Unrecognised, ingest_file
from tracelog.parsers import detect_binary, tensorboard
from tracelog.parsers.base import LineSource
from tracelog.store import Store

SAMPLE_DIR = SAMPLES / "tb_llama3_8b_h100"
SAMPLE = next(SAMPLE_DIR.glob("events.out.tfevents.*"))
LLAMA = SAMPLES / "megatron_lm_llama3_8b_h100.log"


def _load_fuzz() -> Any:
    spec = importlib.util.spec_from_file_location("tracelog_fuzz", ROOT / "benchmarks" / "fuzz.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fuzz = _load_fuzz()


def rows(data: bytes, name: str = "<test>") -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for batch in tensorboard.parse(LineSource(io.BytesIO(data), name)):
        frame = batch.rows
        out.setdefault(batch.table, []).extend(frame if isinstance(frame, list) else frame.to_dicts())
    return out


def events_bytes(tmp_path: Path, events: list[Event]) -> bytes:
    return write(tmp_path / "events.out.tfevents.1.host.1.0", events).read_bytes()


def megatron_step(step: int, loss: float, samples: int) -> list[Event]:
    return [
        scalar("learning-rate", 3e-4, step, 1e9 + step),
        scalar("learning-rate vs samples", 3e-4, samples, 1e9 + step),
        scalar("batch-size", 256.0, step, 1e9 + step),
        scalar("lm loss", loss, step, 1e9 + step),
        scalar("lm loss vs samples", loss, samples, 1e9 + step),
        scalar("loss-scale", 65536.0, step, 1e9 + step),
        scalar("grad-norm", 1.5, step, 1e9 + step),
        scalar("iteration-time", 4.25, step, 1e9 + step),
        scalar("throughput", 402.5, step, 1e9 + step),
        scalar("forward-backward-time", 4.0, step, 1e9 + step),
        scalar("mem-reserved-bytes", 60864.0 * 2**20, step, 1e9 + step),
        scalar("mem-max-allocated-bytes", 58120.0 * 2**20, step, 1e9 + step),
        scalar("lm loss validation", loss + 0.5, step, 1e9 + step),
    ]


def test_megatron_scalars_land_in_their_columns(tmp_path: Path) -> None:
    data = events_bytes(tmp_path, [*megatron_step(10, 9.5, 2560), *megatron_step(20, 8.25, 5120)])
    out = rows(data)
    iterations = out["iterations"]
    assert [r["iteration"] for r in iterations] == [10, 20]
    first = iterations[0]
    assert first["consumed_samples"] == 2560
    assert first["global_batch_size"] == 256
    assert first["lm_loss"] == 9.5 and iterations[1]["lm_loss"] == 8.25
    assert first["learning_rate"] == pytest.approx(3e-4)
    assert first["loss_scale"] == 65536.0 and first["grad_norm"] == 1.5
    assert first["elapsed_s"] == 4.25 and first["tflops_reported"] == 402.5
    assert [(t["name"], t["time_ms"]) for t in out["timers"]] == [("forward-backward", 4000.0)] * 2
    assert out["memory"][0]["reserved_mib"] == 60864.0
    assert out["memory"][0]["max_allocated_mib"] == 58120.0
    assert [(m["key"], m["iteration"], m["value"]) for m in out["iteration_metrics"]] == [
        ("lm loss validation", 10, 10.0),
        ("lm loss validation", 20, 8.75),
    ]


def test_arguments_text_summaries_become_the_run_configuration(tmp_path: Path) -> None:
    args = {"tensor_model_parallel_size": "4", "num_layers": "32", "bf16": "True", "global_batch_size": "256"}
    data = events_bytes(tmp_path, [*(text(k, v) for k, v in args.items()), *megatron_step(10, 9.5, 2560)])
    (run,) = rows(data)["runs"]
    assert (run["tp"], run["layers"], run["precision"], run["gbs"]) == (4, 32, "bf16", 256)
    assert run["framework"] == "megatron"
    assert {p["name"]: p["value"] for p in run["run_params"]} == args


def test_nemo_and_tensorflow_scalars(tmp_path: Path) -> None:
    tf2 = Summary.Value(
        tag="lr",
        metadata=SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars")),
        tensor=tensor_util.make_tensor_proto(np.float32(2.5e-5)),
    )
    data = events_bytes(
        tmp_path,
        [
            scalar("reduced_train_loss", 10.5, 7, 1e9),
            scalar("train_step_timing in s", 4.0625, 7, 1e9),
            scalar("global_batch_size", 256.0, 7, 1e9),
            Event(wall_time=1e9, step=7, summary=Summary(value=[tf2])),
        ],
    )
    (row,) = rows(data)["iterations"]
    assert (row["iteration"], row["lm_loss"], row["elapsed_s"], row["global_batch_size"]) == (
        7,
        10.5,
        4.0625,
        256,
    )
    assert row["learning_rate"] == pytest.approx(2.5e-5)


def test_deepspeed_monitor_scalars_are_metrics_at_their_sample_count(tmp_path: Path) -> None:
    data = events_bytes(
        tmp_path,
        [scalar("Train/Samples/train_loss", 6.5, 8192, 1e9), scalar("Train/Samples/lr", 1e-4, 8192, 1e9)],
    )
    out = rows(data)
    assert "iterations" not in out
    assert [(m["key"], m.get("iteration"), m["text"]) for m in out["iteration_metrics"]] == [
        ("Train/Samples/train_loss", None, "at 8192 samples"),
        ("Train/Samples/lr", None, "at 8192 samples"),
    ]
    assert out["iteration_metrics"][0]["value"] == 6.5


def test_histograms_and_graphs_are_kept_as_unparsed(tmp_path: Path) -> None:
    histogram = Summary.Value(tag="weights", histo={"min": 0.0, "max": 1.0, "num": 3.0})
    data = events_bytes(
        tmp_path,
        [
            Event(step=5, summary=Summary(value=[histogram])),
            Event(step=0, graph_def=b"\x0a\x00"),
            *megatron_step(5, 9.0, 1280),
        ],
    )
    assert [u["text"] for u in rows(data)["unparsed"]] == [
        "step 5: histo summary 'weights'",
        "step 0: graph_def event",
    ]


def test_a_truncated_last_record_keeps_the_good_rows_with_an_event(tmp_path: Path) -> None:
    data = events_bytes(tmp_path, [*megatron_step(10, 9.5, 2560), *megatron_step(20, 8.25, 5120)])
    out = rows(data[:-7])
    assert [r["iteration"] for r in out["iterations"]] == [10, 20]
    (event,) = out["events"]
    assert event["kind"] == "truncated_record"
    assert "cut short in its payload" in event["text"]


def test_a_record_failing_its_crc_is_skipped_and_named(tmp_path: Path) -> None:
    events = [*megatron_step(10, 9.5, 2560), *megatron_step(20, 8.25, 5120)]
    data = bytearray(events_bytes(tmp_path, events))
    # The 4th record (`lm loss` of step 10): flip a byte of its payload.
    offset = 0
    for _ in range(3):
        (length,) = struct.unpack_from("<Q", data, offset)
        offset += 16 + length
    data[offset + 14] ^= 0xFF
    out = rows(bytes(data))
    assert [(r["iteration"], r["lm_loss"]) for r in out["iterations"]] == [(10, None), (20, 8.25)]
    (event,) = out["events"]
    assert (event["kind"], event["line_no"]) == ("bad_record", 4)
    assert f"record at byte {offset} fails its CRC-32C check" in event["text"]


def test_a_broken_header_ends_the_file_with_an_event(tmp_path: Path) -> None:
    data = bytearray(events_bytes(tmp_path, megatron_step(10, 9.5, 2560) + megatron_step(20, 8.25, 5120)))
    (length,) = struct.unpack_from("<Q", data, 0)
    second = 16 + length
    data[second + 9] ^= 0xFF  # the second record's length CRC
    out = rows(bytes(data))
    # Only the first record, the learning rate of iteration 10, was readable.
    assert [(r["iteration"], r["learning_rate"], r.get("lm_loss")) for r in out["iterations"]] == [
        (10, pytest.approx(3e-4), None)
    ]
    assert out["events"][0]["kind"] == "bad_record"
    assert f"record header at byte {second} fails its CRC-32C check" in out["events"][0]["text"]
    assert "records after it cannot be framed" in out["events"][0]["text"]


def test_detection_by_header_and_by_name(tmp_path: Path) -> None:
    head = SAMPLE.read_bytes()[:4096]
    assert detect_binary(head, "anything.bin") is tensorboard
    assert detect_binary(b"\x00\x01 not a record", "run/events.out.tfevents.1.h.1.0") is tensorboard
    assert detect_binary(b"\x7fELF\x02\x01\x01\x00", "core.bin") is None


def test_garbage_named_like_an_events_file_is_the_projects_error(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1.host.1.0"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(TracelogError) as err:
        ingest_file(store, str(path))
    assert str(path) in str(err.value) and "first record header fails its CRC" in str(err.value)
    assert not isinstance(err.value, Unrecognised) or "binary file" not in str(err.value)


def test_the_sample_events_ingest_with_the_logs_values(store: Store) -> None:
    result = ingest_file(store, str(SAMPLE))
    assert (result.format, result.runs) == ("tensorboard", 1)
    got = store.con.execute("SELECT name, tp, dp, gbs, layers, train_iters FROM runs").fetchone()
    assert got == ("tb_llama3_8b_h100", 4, 16, 256, 32, 500)
    row = store.con.execute(
        "SELECT lm_loss, consumed_samples, elapsed_s FROM iterations WHERE iteration = 10"
    ).fetchone()
    assert row is not None
    loss, samples, elapsed = row
    # The log's line: consumed samples 2560, 5512.3 ms per iteration, lm loss 1.105995E+01.
    assert (samples, round(elapsed, 4), round(loss, 5)) == (2560, 5.5123, 11.05995)


@pytest.mark.parametrize("order", ["log first", "events first"])
def test_text_log_and_events_of_one_run_make_one_run(store: Store, order: str) -> None:
    files = [str(LLAMA), str(SAMPLE)] if order == "log first" else [str(SAMPLE), str(LLAMA)]
    for path in files:
        ingest_file(store, path)
    # The log holds two runs (a restart); the events are the first one's.
    assert store.scalar("SELECT count(*) FROM runs") == 2
    per_run = store.con.execute(
        "SELECT count(*), count(DISTINCT iteration), min(iteration), max(iteration) FROM iterations "
        "GROUP BY run_id ORDER BY min(iteration)"
    ).fetchall()
    assert per_run == [(20, 20, 10, 200), (5, 5, 210, 250)]
    first = store.scalar("SELECT run_id FROM iterations WHERE iteration = 10")
    # From the events only: params-norm and the timers of every iteration.
    assert (
        store.scalar(
            "SELECT count(*) FROM iteration_metrics WHERE key = 'params-norm' AND run_id = ?", [first]
        )
        == 20
    )
    assert store.scalar("SELECT count(DISTINCT iteration) FROM timers WHERE run_id = ?", [first]) == 20


def test_events_of_another_run_stay_a_run_of_their_own(store: Store, tmp_path: Path) -> None:
    ingest_file(store, str(LLAMA))
    other = write(
        tmp_path / "other" / "events.out.tfevents.1.h.1.0",
        megatron_step(10, 3.0, 2560) + megatron_step(20, 2.5, 5120) + megatron_step(30, 2.0, 7680),
    )
    result = ingest_file(store, str(other))
    assert result.merged == {}
    assert store.scalar("SELECT count(*) FROM runs") == 3


def test_event_files_of_one_folder_are_one_run(store: Store, tmp_path: Path) -> None:
    folder = tmp_path / "tb"
    write(folder / "events.out.tfevents.1.h.1.0", megatron_step(10, 9.5, 2560))
    write(folder / "events.out.tfevents.2.h.1.0", megatron_step(20, 8.25, 5120))
    for path in sorted(folder.iterdir()):
        ingest_file(store, str(path))
    assert store.con.execute("SELECT run_id, count(*) FROM iterations GROUP BY run_id").fetchall() == [(1, 2)]
    assert store.scalar("SELECT count(*) FROM runs") == 1


def test_an_events_file_still_being_written_holds_back_its_cut_record(store: Store, tmp_path: Path) -> None:
    full = SAMPLE.read_bytes()
    path = tmp_path / "tb" / SAMPLE.name
    path.parent.mkdir()
    path.write_bytes(full[: len(full) // 2 + 5])
    first = ingest_file(store, str(path))
    assert first.bytes_pending > 0
    assert store.scalar("SELECT max(iteration) FROM iterations") < 200
    path.write_bytes(full)
    second = ingest_file(store, str(path))
    assert (second.status, second.bytes_pending) == ("appended", 0)
    assert store.con.execute("SELECT count(*), max(iteration) FROM iterations").fetchone() == (20, 200)
    assert store.scalar("SELECT count(*) FROM events WHERE kind = 'truncated_record'") == 0


def test_merging_again_adds_no_rows(store: Store) -> None:
    ingest_file(store, str(LLAMA))
    ingest_file(store, str(SAMPLE))
    before = store.scalar("SELECT count(*) FROM iterations") + store.scalar("SELECT count(*) FROM timers")
    ingest_file(store, str(SAMPLE), force=True)
    after = store.scalar("SELECT count(*) FROM iterations") + store.scalar("SELECT count(*) FROM timers")
    assert after == before
    assert store.scalar("SELECT count(*) FROM runs") == 2


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(
    cuts=st.lists(
        st.tuples(st.sampled_from(["flip", "cut", "insert"]), st.integers(0, 30_000), st.integers(1, 255)),
        min_size=1,
        max_size=4,
    )
)
def test_damaged_event_files_land_or_fail_with_the_projects_error(cuts: list[tuple[str, int, int]]) -> None:
    """Byte flips, truncation and inserted bytes anywhere in the sample: the ingest succeeds with what
    it could read (and events for the rest) or fails with tracelog's error, leaving a consistent store."""
    data = bytearray(SAMPLE.read_bytes())
    for kind, at, byte in cuts:
        at %= len(data)
        if kind == "flip":
            data[at] ^= byte
        elif kind == "cut":
            del data[max(at, 1) :]
        else:
            data[at:at] = bytes([byte]) * byte
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / SAMPLE.name
        path.write_bytes(bytes(data))
        with Store(Path(folder) / "fuzz.duckdb") as store:
            (result,) = api.ingest(store, [str(path)])
            failed = isinstance(result, api.IngestFailure)
            if isinstance(result, api.IngestFailure):
                assert isinstance(result.error, TracelogError)
            else:
                kinds = {k for (k,) in store.con.execute("SELECT DISTINCT kind FROM events").fetchall()}
                damaged = bytes(data) != SAMPLE.read_bytes()[: len(data)] or len(data) < SAMPLE.stat().st_size
                assert (
                    not damaged
                    or kinds & {"bad_record", "truncated_record", "bad_value"}
                    or (store.scalar("SELECT count(*) FROM unparsed") > 0)
                ), "damage nobody reported"
            assert fuzz.consistency_problems(store.con, failed=failed) == []


def test_the_joined_run_is_refreshed_with_the_events_rows(store: Store) -> None:
    api.ingest(store, [str(LLAMA)])
    (result,) = api.ingest(store, [str(SAMPLE)])
    assert isinstance(result, IngestResult) and result.merged
    assert store.scalar("SELECT count(*) FROM sources WHERE refresh_pending") == 0
