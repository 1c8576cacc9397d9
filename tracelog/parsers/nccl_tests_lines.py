"""The lines nccl-tests and rccl-tests print around their table, as patterns: the version, header and
device lines, the footer, failures and the shell command that started a test (nccl-tests `src/common.cu`,
`src/util.cu`; rccl-tests' own spellings). `nccl_tests` reads a file's lines with them."""

from __future__ import annotations

import re

# Each `#` optional: a copy of the output as GitHub renders it (the `#` lines of a paste outside a code block
# are markdown headings, shown without their `#`: NVIDIA/nccl-tests#249, NVIDIA/nccl#583) keeps the words.
VERSION_RX = re.compile(r"^#?\s*([nr]ccl)-tests version\s+(\S+)(.*)$")  # rccl-tests prints its own name
STARTING_RX = re.compile(r"^#?\s*Collective test starting:\s*(\S+)")
CONCLUDED_RX = re.compile(r"^#?\s*Collective test concluded:\s*(\S+)")
NTHREAD_RX = re.compile(r"^#?\s*nThreads?:?\s+\d+")  # rccl-tests of 2023 wrote `nThreads:`
# rccl-tests' own header from 2022-03 (ROCm/rccl-tests@0500f2f: `# nThreads: 1 nGpus: 4 nRanks: 1 minBytes:`,
# nRanks being ranks per GPU), which nccl-tests never printed
RCCL_HEADER_RX = re.compile(r"^#?\s*nThreads:\s+\d+\s+nGpus:\s+\d+\s+nRanks:")
AMD_GPU_RX = re.compile(r"AMD\b|Radeon\b")  # `AMD Instinct MI300X`, `AMD Radeon PRO W7900`
# Names bounded in length: `findall` tries every start, and an unbounded name made a 64 KiB word of
# letters quadratic (minutes); nccl-tests' field names are a few letters (`nThread`, `minBytes`).
HEADER_FIELD_RX = re.compile(r"([A-Za-z_][A-Za-z_ ]{0,40}?):?\s+(\d[^\s]*)")
DEVICE_RX = re.compile(
    r"^#?\s*Rank\s+(\d+)(?:\s+Group\s+(\d+))?(?:\s+Pid\s+(\d+))?\s+on\s+(?:(\S+)\s+)?device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)  # the host blank where the machine's name was (`Pid   4349 on        device  0`, NVIDIA/nccl#841); no
# `Pid` before nccl-tests@cbe7f65 (2019-03: `#   Rank  0 on  dgx1-07 device  0 [0x06] Tesla V100-SXM2-16GB`)
OOB_RX = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")
AVG_RX = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*([-+]?[\d.]+(?:[eE][-+]?\d+)?|nan|inf)\s*(\w*)")
MEMORY_RX = re.compile(r"^#\s*GPU memory usage\s*:\s*(.*?)\s*$")
NOTE_RX = re.compile(
    r"^#?\s*(Blocking Enabled|Parallel Init Enabled|Per-Iteration Report|Writing JSON output to|Writing results to file"
    r"|GPU memory usage|skipping json output)\s*:?\s*(.*?)\s*$"
)
REDUCED_RX = re.compile(r"^#\s*Reducing maxBytes to (\d+)")
ERROR_LINE_RX = re.compile(r"^#\s*error:\s*(.*?)\s*$")
NCCL_VERSION_RX = re.compile(r"^NCCL version\s+(\S+)")
ENV_SET_RX = re.compile(r"NCCL INFO (NCCL_ALGO|NCCL_PROTO|NCCL_NVLS_ENABLE) set by environment to (\S+?)\.?$")
"""What NCCL says of the choices a user forced (src/graph/tuning.cc, src/misc/param.cc), which the model
needs: a bench run with `NCCL_ALGO=Ring` is held to the ring, not to what NCCL would pick itself."""
RCCL_VERSION_RX = re.compile(r"^rccl-tests:\s*Version\s+(\S+)")
RCCL_PRINTED_RX = re.compile(
    r"^RCCL version\s+(\d\S*)"
)  # RCCL's own line (`RCCL version 2.17.1+hip5.7 HEAD:..`)
RCCL_FACT_RX = re.compile(r"^(RCCL version|HIP version|ROCm version|Hostname|Librccl path)\s*:\s*(\S.*?)\s*$")
FAILURE_RX = re.compile(
    r"Test (?:NCCL |CUDA )?failure|Test timeout|Cuda failure|NCCL failure \S+:\d+|MPI_ABORT|mpirun noticed|exited on signal"
    r"|Segmentation fault|srun: error|slurmstepd: error|CANCELLED AT|terminate called|\bAborted\b|\bKilled\b"
    r"|Bus error"
)
# nccl-tests 1.x's failure (`NCCL failure all_reduce.cu:95 'unhandled cuda error'`, src/common.h NCCLCHECK
# before 2019) and build line (`# NCCL Tests compiled with NCCL 1.0`, src/common.cu 2017-12 to 2019-03)
COMPILED_RX = re.compile(r"^#\s*NCCL Tests compiled with NCCL\s+(\S+)")
XID_RX = re.compile(r"NVRM: Xid\b")
# NCCL's init line for each rank (init.cc): `comm 0x7fc1dc000dc0 rank 7 nranks 16 cudaDev 7 busId a01d0 - Init
# COMPLETE`; older releases print `nRanks`
COMM_RX = re.compile(r"NCCL INFO comm 0x[0-9a-fA-F]+ rank \d+ n[Rr]anks (\d+)")
# `user@host:dir$`, `$`, and a container's shell (`Singularity> `, `Apptainer> `: NVIDIA/nccl#1812)
SHELL_PROMPT_RX = re.compile(r"^(?:[\w.-]+@[\w.-]+:\S*?\s?[#$]|\$|Singularity>|Apptainer>)\s+(?=\S)")
COMMAND_RX = re.compile(r"(?:^|[\s/])([a-z0-9]+(?:_[a-z0-9]+)*)_perf(?:_mpi)?(?=\s|$)")
UNITS_RX = re.compile(r"^#?\s*\(B\)")
INLINE_CODE_RX = re.compile(r"^\s*`(?!`)|(?<!`)`\s*$")
HASHLESS_RX = re.compile(
    r"^(?:nThreads?:?\s+\d|Rank\s+\d+\s.*\bPid\s+\d|Using devices$|Out of bounds values\s*:|Avg bus bandwidth\s*:"
    r"|Collective test (?:starting|concluded):|[nr]ccl-tests version\s|Blocking Enabled|\(B\)\s"
    r"|out-of-place\s+in-place$|size\s+count\s.*\balgbw\b)"
)
"""The header and footer lines of a copy that lost their `#` (GitHub shows them as headings)."""
