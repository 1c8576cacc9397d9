"""Hardware facts resolved per run and bench, each source on its own and in order: the command line, the
log's own lines, benches from the same hosts, the tracelog.toml cluster that matches."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracelog import api, clusters, hardware, hardware_lines
from tracelog.errors import TracelogError
from tracelog.store import Store

from .conftest import SAMPLES

# The head of a Megatron-LM log: enough for detection and one run, and no word about the hardware.
MEGATRON = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_text(encoding="utf-8")

# nvidia-smi as BigScience's Jean Zay jobs print it before training (the V100 name cut by the table,
# the memory line telling 32 GB from 16 GB), with a job-script line around it.
SMI_TABLE = """+ nvidia-smi
Sun May 23 08:40:52 2021
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 460.32.03    Driver Version: 460.32.03    CUDA Version: 11.2     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|===============================+======================+======================|
|   0  Tesla V100-SXM2...  Off  | 00000000:1A:00.0 Off |                    0 |
| N/A   46C    P0    44W / 300W |      0MiB / {mib}MiB |      0%      Default |
|                               |                      |                  N/A |
+-------------------------------+----------------------+----------------------+
+ cd /code/megatron-lm/
"""

# NCCL's own setup lines, as a 16-node Jean Zay job prints them (host:pid:tid [dev] prefix, 4 Omni-Path
# HFIs), behind srun's `0: ` rank label.
NCCL_LINES = """0: r6i4n5:42471:42471 [0] NCCL INFO Bootstrap : Using [0]ib0:10.148.8.41<0> [1]ib1:10.149.8.41<0>
0: r6i4n5:42471:42471 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
0: r6i4n5:42471:42471 [0] NCCL INFO NET/IB : Using [0]hfi1_2:1/IB [1]hfi1_0:1/IB [2]hfi1_3:1/IB [3]hfi1_1:1/IB ; OOB ib0:10.148.8.41<0>
0: r6i4n5:42471:42471 [0] NCCL INFO Using network IB
"""

# nccl-tests on the same host, naming its GPU on its device lines.
NCCL_TESTS = """# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  42471 on     r6i4n5 device  0 [0x1a] Tesla V100-SXM2-16GB
#  Rank  1 Group  0 Pid  42472 on     r6i4n5 device  1 [0x1c] Tesla V100-SXM2-16GB
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    11.02    0.00    0.00      0    10.87    0.00    0.00      0
   134217728      33554432     float     sum      -1   2861.4   46.91   46.91      0   2858.9   46.95   46.95      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 23.46
#
"""


def with_header(header: str) -> str:
    """The Megatron sample with hardware lines before its first line, as a job script prints them."""
    return header + MEGATRON


@pytest.fixture(autouse=True)
def no_user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def facts(db: Path, kind: str = "run") -> dict[str, tuple[str, str, str]]:
    """fact -> (value, source, detail) of the first run or bench."""
    with Store(db) as store:
        rows = store.con.execute(
            "SELECT fact, value, source, detail FROM hardware_sources WHERE subject_kind = ? "
            "AND subject_id = (SELECT min(subject_id) FROM hardware_sources WHERE subject_kind = ?)",
            [kind, kind],
        ).fetchall()
    return {fact: (value, source, detail) for fact, value, source, detail in rows}


A100_CLUSTER = """[cluster.lab]
gpu = "NVIDIA A100-SXM4-80GB"
gpus_per_node = 8
fabric = "ib-hdr-x8"
nics_per_node = 8
hosts = ["r6i4n*"]
paths = ["jobs/*"]
"""


# --- each source on its own ------------------------------------------------------------------------


def test_command_line(tmp_path: Path) -> None:
    log = write(tmp_path / "logs", "run.log", MEGATRON)
    api.ingest(tmp_path / "a.duckdb", [str(log)], gpu="h100-sxm5-80gb", fabric="ib-ndr-x8")
    found = facts(tmp_path / "a.duckdb")
    assert found["gpu_model"] == ("h100-sxm5-80gb", "command line", None)
    assert found["fabric"] == ("ib-ndr-x8", "command line", None)


@pytest.mark.parametrize(("mib", "gpu"), [(32510, "v100-sxm2-32gb"), (16160, "v100-sxm2-16gb")])
def test_log_nvidia_smi_table_cut_name(tmp_path: Path, mib: int, gpu: str) -> None:
    log = write(tmp_path, "run.log", with_header(SMI_TABLE.replace("{mib}", str(mib))))
    api.ingest(tmp_path / "a.duckdb", [str(log)])
    value, source, detail = facts(tmp_path / "a.duckdb")["gpu_model"]
    assert (value, source) == (gpu, "log")
    assert detail == "line 9 (nvidia-smi)"


@pytest.mark.parametrize(
    ("line", "gpu"),
    [
        ("device name: NVIDIA H100 80GB HBM3\n", "h100-sxm5-80gb"),  # torch.cuda.get_device_name()
        ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5c0e9a1e-8e4b-2c43-95b3-1a2b3c4d5e6f)\n", "a100-sxm4-80gb"),
        ("[rank0]: torch.cuda.get_device_name(0) = NVIDIA A100-SXM4-40GB\n", "a100-sxm4-40gb"),
    ],
)
def test_log_device_names(tmp_path: Path, line: str, gpu: str) -> None:
    # at the end of the log (a check run after training), so the head still reads as Megatron's
    log = write(tmp_path, "run.log", MEGATRON + "[W init] some launcher warning\n" + line)
    api.ingest(tmp_path / "a.duckdb", [str(log)])
    value, source, detail = facts(tmp_path / "a.duckdb")["gpu_model"]
    line_no = MEGATRON.count("\n") + 2
    assert (value, source, detail) == (gpu, "log", f"line {line_no} (device name)")


def test_log_nccl_info_names_hosts_and_nics(tmp_path: Path) -> None:
    log = write(tmp_path, "run.log", with_header(NCCL_LINES))
    api.ingest(tmp_path / "a.duckdb", [str(log)])
    found = facts(tmp_path / "a.duckdb")
    assert found["nics_per_node"] == ("4", "log", "line 3 (NCCL NET)")
    # hfi1 is the Omni-Path HFI driver: the devices say their fabric
    assert found["fabric"] == ("opa-100", "log", "line 3 (NCCL NET: Omni-Path hfi1 devices)")
    with Store(tmp_path / "a.duckdb") as store:
        assert store.scalar("SELECT hosts FROM runs ORDER BY run_id LIMIT 1") == ["r6i4n5"]


def test_connectx_devices_say_nothing_of_their_speed(tmp_path: Path) -> None:
    mlx5 = NCCL_LINES.replace("hfi1_", "mlx5_")
    log = write(tmp_path, "run.log", with_header(mlx5))
    api.ingest(tmp_path / "a.duckdb", [str(log)])
    found = facts(tmp_path / "a.duckdb")
    assert found["nics_per_node"][0] == "4" and "fabric" not in found
    mixed = NCCL_LINES.replace("[1]hfi1_0", "[1]mlx5_0")
    assert hardware_lines.nccl_fabric(mixed.splitlines()[2]) is None
    assert hardware_lines.nccl_fabric(NCCL_LINES.splitlines()[2]) == ("opa-100", "Omni-Path hfi1 devices")


# aws-ofi-nccl's provider line on an HPE Slingshot machine, as its releases print it (the first from 1.1x,
# the second from older aws-ofi-rccl); host names invented.
OFI_LINES = """nid001234:40811:40811 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.19.0
nid001234:40811:40811 [0] NCCL INFO NET/OFI Using Libfabric version 2.1
nid001234:40811:40811 [0] NCCL INFO NET/OFI Selected provider is cxi, fabric is cxi (found 4 nics)
nid001234:40811:40811 [0] NCCL INFO Using network AWS Libfabric
"""


def test_ofi_provider_line_names_slingshot_and_its_nics(tmp_path: Path) -> None:
    log = write(tmp_path, "run.log", with_header(OFI_LINES))
    api.ingest(tmp_path / "a.duckdb", [str(log)])
    found = facts(tmp_path / "a.duckdb")
    assert found["fabric"] == ("slingshot11", "log", "line 3 (NCCL NET: Slingshot cxi provider)")
    assert found["nics_per_node"] == ("4", "log", "line 3 (NCCL NET)")
    old = "x:1:1 [0] NCCL INFO NET/OFI Selected Provider is cxi"
    assert hardware_lines.nccl_fabric(old) == ("slingshot11", "Slingshot cxi provider")
    assert hardware_lines.nccl_nics(old) is None
    efa = "x:1:1 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)"
    assert hardware_lines.nccl_fabric(efa) is None and hardware_lines.nccl_nics(efa) == 4
    # without RDMA NCCL lists every IP interface it may bind: no fabric ports to count (a published
    # single-GPU desktop's line, eunomia-bpf/nccl-eBPF's notes: Ethernet, Wi-Fi and a Tailscale tunnel)
    sockets = (
        "lab:1425048:1425048 [0] NCCL INFO NET/Socket : Using [0]enp129s0:128.114.59.195<0> "
        "[1]wlp128s20f3:169.233.112.15<0> [2]tailscale0:fe80::56c4:f535:9d9e:1004%tailscale0<0>"
    )
    assert hardware_lines.nccl_nics(sockets) is None
    assert (
        hardware_lines.nccl_nics("x:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0")
        == 2
    )
    # the model then runs the node's four 200 Gb/s ports, as the catalog's Frontier node
    node = hardware.fabric_of(found["fabric"][0], int(found["nics_per_node"][0]))
    assert node.unidirectional_gbps == hardware.link("slingshot11-x4").unidirectional_gbps


# A SLURM job script's `set -x` echo, as BigScience's 2021 outputs show it (invented values).
LAUNCHER_LINES = """+ GPUS_PER_NODE=4
+ NNODES=16
+ export 'LAUNCHER=python -u -m torch.distributed.launch --nproc_per_node 4 --nnodes 16 --master_port 6000'
"""


def test_launcher_lines_say_how_many_gpus_a_node_runs(tmp_path: Path) -> None:
    log = write(tmp_path, "run.log", with_header(LAUNCHER_LINES))
    api.ingest(tmp_path / "a.duckdb", [str(log)])
    assert facts(tmp_path / "a.duckdb")["gpus_per_node"] == ("4", "log", "line 1 (launcher)")
    assert hardware_lines.launcher_gpus_per_node("torchrun --nproc-per-node=8 --nnodes=2 train.py") == 8
    assert hardware_lines.launcher_gpus_per_node("DISTRIBUTED_ARGS='--nproc_per_node $GPUS_PER_NODE'") is None
    assert hardware_lines.launcher_gpus_per_node("--nproc_per_node=gpu") is None
    # what the command line says wins over the log
    api.ingest(tmp_path / "b.duckdb", [str(log)], gpus_per_node=8)
    assert facts(tmp_path / "b.duckdb")["gpus_per_node"][:2] == ("8", "command line")


def test_log_bench_device_lines(tmp_path: Path) -> None:
    bench = write(tmp_path, "nccl.txt", NCCL_TESTS)
    api.ingest(tmp_path / "a.duckdb", [str(bench)])
    found = facts(tmp_path / "a.duckdb", "bench")
    assert found["gpu_model"] == ("v100-sxm2-16gb", "log", "device lines: Tesla V100-SXM2-16GB")
    assert found["gpus_per_node"][1] == "log"


def test_bench_from_the_same_hosts(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    api.ingest(db, [str(write(tmp_path, "nccl.txt", NCCL_TESTS))])
    api.ingest(db, [str(write(tmp_path, "run.log", with_header(NCCL_LINES)))])
    assert facts(db)["gpu_model"] == ("v100-sxm2-16gb", "bench", "bench 1 on r6i4n5")


def test_cluster_by_host_pattern(tmp_path: Path) -> None:
    write(tmp_path, "tracelog.toml", A100_CLUSTER)
    log = write(tmp_path / "elsewhere", "run.log", with_header(NCCL_LINES))
    api.ingest(tmp_path / "a.duckdb", [str(log)])
    found = facts(tmp_path / "a.duckdb")
    assert found["gpu_model"] == ("a100-sxm4-80gb", "cluster", "lab (host r6i4n5)")
    assert found["nics_per_node"][1] == "log"  # the log's NCCL line says 4, before the cluster's 8


def test_cluster_by_path_glob(tmp_path: Path) -> None:
    write(tmp_path, "tracelog.toml", A100_CLUSTER)
    log = write(tmp_path / "jobs", "run.log", MEGATRON)
    api.ingest(tmp_path / "a.duckdb", [str(log)])
    found = facts(tmp_path / "a.duckdb")
    assert found["gpu_model"] == ("a100-sxm4-80gb", "cluster", "lab (path jobs/*)")
    assert found["fabric"] == ("ib-hdr-x8", "cluster", "lab (path jobs/*)")
    assert found["nics_per_node"] == ("8", "cluster", "lab (path jobs/*)")


# --- the order --------------------------------------------------------------------------------------


def test_order_command_line_over_log_over_bench_over_cluster(tmp_path: Path) -> None:
    write(tmp_path, "tracelog.toml", A100_CLUSTER)
    db = tmp_path / "a.duckdb"
    api.ingest(db, [str(write(tmp_path / "benches", "nccl.txt", NCCL_TESTS))])  # V100 16 GB on r6i4n5

    bench_only = write(tmp_path / "jobs", "a.log", with_header(NCCL_LINES))
    api.ingest(db, [str(bench_only)])
    smi = SMI_TABLE.replace("{mib}", "32510")
    log_too = write(tmp_path / "jobs", "b.log", with_header(smi + NCCL_LINES) + "\n")
    api.ingest(db, [str(log_too)])
    cli_too = write(tmp_path / "jobs", "c.log", with_header(smi + NCCL_LINES) + "\n\n")
    api.ingest(db, [str(cli_too)], gpu="h200-sxm-141gb")

    with Store(db) as store:
        rows = store.con.execute(
            "SELECT s.path, h.value, h.source FROM run_hardware h JOIN runs r USING (run_id) "
            "JOIN sources s USING (source_id) WHERE h.fact = 'gpu_model' AND r.run_key = 0 ORDER BY s.path"
        ).fetchall()
    by_file = {Path(path).name: (value, source) for path, value, source in rows}
    assert by_file == {
        "a.log": ("v100-sxm2-16gb", "bench"),  # the bench's host before the cluster's host and path
        "b.log": ("v100-sxm2-32gb", "log"),  # the log's nvidia-smi before the bench
        "c.log": ("h200-sxm-141gb", "command line"),
    }


def test_the_model_runs_on_a_cluster_gpu(tmp_path: Path) -> None:
    write(tmp_path, "tracelog.toml", A100_CLUSTER)
    db = tmp_path / "a.duckdb"
    api.ingest(db, [str(write(tmp_path / "jobs", "run.log", MEGATRON))])
    runs = api.runs(db)
    assert runs["sec_per_it_predicted"].notna().all()


# --- lines and files --------------------------------------------------------------------------------


def test_a_short_name_is_not_read_inside_a_longer_one() -> None:
    found = hardware_lines.gpu_named("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)")
    assert found is not None and found.id == "a100-sxm4-80gb"
    assert hardware_lines.gpu_named("loaded layer A10 of the model") is None  # no GPU word on the line


def test_config_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    user = write(
        tmp_path / "config" / "tracelog", "tracelog.toml", '[cluster.x]\ngpu = "l40s"\npaths = ["*"]\n'
    )
    near_db = write(tmp_path / "db", "tracelog.toml", '[cluster.x]\ngpu = "l4"\npaths = ["*"]\n')
    near_log = write(tmp_path / "logs" / "a", "tracelog.toml", '[cluster.x]\ngpu = "a10"\npaths = ["*"]\n')
    log = write(tmp_path / "logs" / "a" / "b", "run.log", MEGATRON)
    found = clusters.config_files(str(tmp_path / "db" / "t.duckdb"), [str(log)])
    assert found == [near_log.resolve(), near_db.resolve(), user.resolve()]
    assert clusters.load(str(tmp_path / "db" / "t.duckdb"), [str(log)]).found[0].gpu_model == "a10"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[cluster.x]\ngpu = "a100-sxm9"\n', "unknown GPU"),
        ("[cluster.x]\ngpus_per_node = -1\n", "positive integer"),
        ("[cluster.x]\ngpu = \n", "not valid TOML"),
        ('[cluster.x]\ncolour = "red"\n', "unknown keys colour"),
    ],
)
def test_bad_config_names_its_file(tmp_path: Path, text: str, message: str) -> None:
    config = write(tmp_path, "tracelog.toml", text)
    with pytest.raises(TracelogError) as err:
        clusters.read_config(config)
    assert message in str(err.value)
    assert "tracelog.toml" in str(err.value)


def test_add_and_remove_keep_the_rest_of_the_file(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    write(tmp_path, "tracelog.toml", "# our machines\n" + A100_CLUSTER)
    api.add_cluster(db, "h100", gpu="NVIDIA H100 80GB HBM3", gpus_per_node=8, hosts=["h100-*"])
    listed = api.clusters(db)
    assert list(listed["name"]) == ["lab", "h100"]
    assert listed.loc[1, "gpu"] == "h100-sxm5-80gb"
    api.remove_cluster(db, "lab")
    text = (tmp_path / "tracelog.toml").read_text()
    assert text.startswith("# our machines\n")
    assert "[cluster.lab]" not in text and "[cluster.h100]" in text
    with pytest.raises(TracelogError, match="no cluster 'lab'"):
        api.remove_cluster(db, "lab")
