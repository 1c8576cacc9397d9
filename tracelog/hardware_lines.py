"""The lines of a training log that say what it ran on, read against the catalog.

Training logs rarely name their GPU in a line a parser owns, but jobs print it around the training:
- an `nvidia-smi` table, whose name column truncates long names (`|   0  Tesla V100-SXM2...  Off  |
  00000000:1A:00.0 Off |`) and whose next line gives the memory (`|  0MiB / 32510MiB |`), which tells
  the 16 GB part from the 32 GB one (BigScience Jean Zay job logs print this before training);
- `nvidia-smi -L` (`GPU 0: NVIDIA A100-SXM4-80GB (UUID: ...)`), and a script's own
  `torch.cuda.get_device_name()` (`device name: NVIDIA H100 80GB HBM3`);
- DeepSpeed's launcher report `WORLD INFO DICT: {'gpu-node-01': [0, 1, 2, 3, 4, 5, 6, 7], ...}`: hosts and
  the GPUs of each;
- nccl-tests device lines (`#  Rank  0 Group  0 Pid 1234 on host device  0 [0x07] NVIDIA A100-SXM4-80GB`),
  also when a training job's log carries them;
- NCCL's INFO lines: `NCCL version 2.10.3+cuda11.3` the release (whose buffers the memory model counts
  before 2.22), `host:pid:tid [dev] NCCL INFO ...` name the host, and `NET/IB : Using [0]mlx5_0:1/IB
  [1]mlx5_1:1/IB ...` the NICs NCCL uses on that node. A device's driver name says its fabric only for
  Omni-Path (`hfi1_0`: Intel's Omni-Path HFI driver, 100 Gb/s ports); `mlx5_N` is any ConnectX, from
  100 Gb Ethernet to NDR InfiniBand, and says nothing of the speed. Through the OFI plugin (aws-ofi-nccl,
  aws-ofi-rccl) `NET/OFI Selected provider is cxi ... (found 4 nics)` gives the count, and `cxi` says
  Slingshot-11.
Only a full catalog name counts (`match_gpu` rules: exact, case and spaces folded), between word
boundaries that are not `-`, so `A10` is never read inside `A100-SXM4-80GB`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from tracelog import hardware
from tracelog.hardware import Gpu

GPU_CONTEXT = r"NVIDIA|Tesla|Instinct|Gaudi|HL-[23]|GeForce|RTX|device.?name|GPU [0-9]+:"
"""Only lines with one of these words are searched for a GPU name."""
SCAN_WORDS = (
    "NVIDIA",
    "Tesla",
    "Instinct",
    "Gaudi",
    "HL-",
    "GeForce",
    "RTX",
    "evice",
    "GPU ",
    "NCCL INFO NET/",
    "NCCL INFO Using network",
    "NCCL version",
    "WORLD INFO",
    "nproc",
    "GPUS_PER_NODE=",
)
"""Literal words that pick, in SQL, the lines worth reading in Python (a literal search over millions of
unparsed lines costs a third less than the regex)."""
NCCL_LINE = r"(?:^|[\s>:\]])([A-Za-z0-9][\w.\-]*):[0-9]+:[0-9]+ \[[0-9]+\] NCCL (?:INFO|WARN)"
"""SQL and Python regex: NCCL's `host:pid:tid [dev]` prefix, after any launcher prefix (`0: `, `[1,4]<stderr>:`)."""
WORLD_INFO = re.compile(r"WORLD INFO DICT: \{(.*)\}")
LAUNCHER_PER_NODE = re.compile(r"(?:--nproc[_-]per[_-]node[= ]+|(?<![\w$])GPUS_PER_NODE=)(\d+)(?![\w.])")
"""The launcher's processes per node as a job script echoes it (`set -x`, SLURM output): torch.distributed's
`--nproc_per_node 4`, torchrun's `--nproc-per-node=8`, or Megatron's example scripts' `GPUS_PER_NODE=8`."""
WORLD_HOST = re.compile(r"'([^']+)': \[([0-9, ]*)\]")
NET_IB = re.compile(r"NCCL INFO NET/(?:IB|OFI|Socket) ?: ?Using (.*?)(?: ; OOB|$)")
NIC = re.compile(r"\[\d+\]\S+")
NIC_DEVICE = re.compile(r"\[\d+\]([A-Za-z]+[0-9]*)_[0-9]+")
FABRIC_OF_DRIVER = {"hfi1": ("opa-100", "Omni-Path")}
"""NIC driver names that say which catalog port they are (Linux `hfi1`: Intel Omni-Path Host Fabric
Interface 100 series, the driver of every Omni-Path 100 HFI)."""
OFI_PROVIDER = re.compile(
    r"NCCL INFO NET/OFI Selected [Pp]rovider is (\w+)(?:, fabric is [\w.-]+)?(?: \((?:found )?(\d+) nics?\))?"
)
"""aws-ofi-nccl's (and aws-ofi-rccl's) choice of libfabric provider: `NET/OFI Selected provider is cxi, fabric is
cxi (found 4 nics)`, older releases `Selected Provider is cxi`."""
FABRIC_OF_PROVIDER = {"cxi": ("slingshot11", "Slingshot")}
"""libfabric providers that say which catalog port they are: `cxi` drives HPE's Cassini NIC, Slingshot-11
only (200 Gb/s; Slingshot-10 ran ConnectX NICs through `verbs`). `efa` is not one: its per-NIC speed
differs between instance types (p4d 100 Gb/s, p5en 200 Gb/s)."""
SMI_ROW = re.compile(r"^\|\s+\d+\s+(.+?)\s+(?:On|Off)\s+\|\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:")
SMI_MEMORY = re.compile(r"\|\s+\d+MiB\s*/\s*(\d+)MiB\s+\|")
SMI_MEMORY_SLACK = 0.08
"""How far nvidia-smi's total MiB sits under the catalog's memory size: 32510 MiB for a 32 GiB V100
(0.8 %), 81920 for an 80 GB A100; 8 % leaves out the next size class (16 vs 32, 40 vs 80)."""


@dataclass(frozen=True)
class GpuSeen:
    gpu: Gpu
    line_no: int
    how: str  # nvidia-smi, device name


@cache
def _names() -> re.Pattern[str]:
    names = sorted({n for g in hardware.gpus() for n in g.match}, key=len, reverse=True)
    alternatives = "|".join(r"\s+".join(map(re.escape, n.split())) for n in names)
    return re.compile(rf"(?<![\w-])(?:{alternatives})(?![\w-])", re.IGNORECASE)


def gpu_named(text: str) -> Gpu | None:
    """The catalog GPU a line names in full, or None."""
    if not re.search(GPU_CONTEXT, text):
        return None
    match = _names().search(text)
    return hardware.match_gpu(match.group(0)) if match else None


def smi_gpu(row: str, next_line: str | None) -> Gpu | None:
    """The GPU of an nvidia-smi table row; a name cut with `...` is completed by the memory size."""
    match = SMI_ROW.match(row)
    if match is None:
        return None
    name = match.group(1).strip()
    if not name.endswith("..."):
        return hardware.match_gpu(name) or gpu_named(name)
    memory = SMI_MEMORY.search(next_line or "")
    if memory is None:
        return None
    total_mib = float(memory.group(1))
    prefix = " ".join(name[:-3].split()).casefold()
    found = {
        g.id: g
        for g in hardware.gpus()
        for n in g.match
        if " ".join(n.split()).casefold().startswith(prefix)
        and abs(g.memory_mib - total_mib) <= SMI_MEMORY_SLACK * g.memory_mib
    }
    return next(iter(found.values())) if len(found) == 1 else None


def gpu_seen(line_no: int, text: str, next_line: str | None) -> GpuSeen | None:
    smi = smi_gpu(text, next_line)
    if smi is not None:
        return GpuSeen(smi, line_no, "nvidia-smi")
    named = gpu_named(text)
    return GpuSeen(named, line_no, "device name") if named is not None else None


def nccl_host(text: str) -> str | None:
    match = re.match(NCCL_LINE, text)
    return match.group(1) if match else None


def nccl_nics(text: str) -> int | None:
    """NICs NCCL uses on a node, from its `NET/IB : Using [0]mlx5_0:1/IB ...` line, or those the OFI plugin
    found (`Selected provider is cxi, fabric is cxi (found 4 nics)`). Not the interfaces of `NET/Socket`:
    without RDMA NCCL lists every IP interface it may bind (a desktop's Wi-Fi, a VPN's tunnel), no count
    of fabric ports."""
    match = NET_IB.search(text)
    if match is not None:
        return None if "NET/Socket" in match.group(0) else len(NIC.findall(match.group(1))) or None
    ofi = OFI_PROVIDER.search(text)
    return int(ofi.group(2)) if ofi is not None and ofi.group(2) else None


def nccl_fabric(text: str) -> tuple[str, str] | None:
    """The catalog port of the NICs NCCL's `NET/IB : Using [0]hfi1_0:1/IB ...` line lists and how it was
    told (`Omni-Path hfi1 devices`), when their driver names one (`FABRIC_OF_DRIVER`) and all of them the
    same, or of the OFI plugin's provider (`FABRIC_OF_PROVIDER`); None otherwise."""
    match = NET_IB.search(text)
    if match is not None:
        drivers = set(NIC_DEVICE.findall(match.group(1)))
        name, table, told = (drivers.pop() if len(drivers) == 1 else ""), FABRIC_OF_DRIVER, "devices"
    else:
        ofi = OFI_PROVIDER.search(text)
        name, table, told = (ofi.group(1) if ofi else ""), FABRIC_OF_PROVIDER, "provider"
    if name.lower() not in table:
        return None
    port, fabric = table[name.lower()]
    return port, f"{fabric} {name} {told}"


NCCL_NETWORK = re.compile(r"NCCL INFO Using network (\S.*?)\s*$")


def nccl_network(text: str) -> str | None:
    """The transport NCCL chose between nodes (`NCCL INFO Using network IB`: `IB`, `Socket`, a plugin's name
    such as `AWS Libfabric`), or None."""
    match = NCCL_NETWORK.search(text)
    return match.group(1) if match else None


NCCL_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")


def nccl_version(text: str) -> str | None:
    """The NCCL release a job ran (`host:pid:tid [0] NCCL INFO NCCL version 2.10.3+cuda11.3`; PyTorch's and
    nccl-tests' own `NCCL version 2.18.1`), or None."""
    match = NCCL_VERSION.search(text)
    return match.group(1) if match else None


def launcher_gpus_per_node(text: str) -> int | None:
    """GPUs per node from a launcher line the log echoes (`LAUNCHER_PER_NODE`), or None."""
    match = LAUNCHER_PER_NODE.search(text)
    if match is None:
        return None
    count = int(match.group(1))
    return count if 0 < count <= 64 else None


def world_info(text: str) -> dict[str, int] | None:
    """Hosts and GPUs per host of DeepSpeed's launcher line, or None."""
    match = WORLD_INFO.search(text)
    if match is None:
        return None
    hosts = {
        host: len([d for d in devices.split(",") if d.strip()])
        for host, devices in WORLD_HOST.findall(match.group(1))
    }
    return hosts or None
