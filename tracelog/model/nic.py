"""What one NIC allows an RDMA bandwidth test (perftest's `ib_write_bw` and kin): its line rate, less the
bytes each packet spends on headers, in one direction or, for a bidirectional run, both.

The line rate is the port's data rate in one direction (the catalog's `unidirectional_gbps` of an
`ib-*`, `roce-*` or `eth-*` port; NDR 4x: 400 Gb/s = 50 GB/s, InfiniBand Trade Association roadmap).
Each packet carries at most one path MTU of payload (perftest prints it: `Mtu : 4096[B]`), and on the
wire adds per packet:

- InfiniBand: LRH 8 + BTH 12 + ICRC 4 + VCRC 2 = 26 bytes (InfiniBand Architecture Specification vol. 1,
  ch. 5.2 and 7.8; the first packet of an RDMA write adds a 16-byte RETH, a read response a 4-byte AETH:
  nothing at the sizes of a plateau).
- RoCE v2: the Ethernet preamble and start delimiter 8, MAC header 14, FCS 4 and the inter-packet gap 12
  (IEEE 802.3), IPv4 20, UDP 8, BTH 12 and ICRC 4 = 82 bytes (IBTA RoCE v2 annex A17; IPv6 adds 20).

So the plateau a healthy port reaches is line rate x MTU / (MTU + headers): 99.4 % of 50 GB/s on NDR at
MTU 4096, 98.0 % of a 400 GbE RoCE port at 4096 and 92.6 % at 1024 (the RDMA MTU of a 1500-byte Ethernet
MTU). Published runs sit just under it: a ConnectX-7 NDR `ib_write_bw --report_gbits` at 64 KiB printed
392.34 Gb/s, 98.7 % of the 397.5 Gb/s computed here (a public how-to on connecting two GPU servers, 2026);
Azure's health checks accept 375 Gb/s per NDR port and 185 per HDR port (Azure/azurehpc-health-checks
`conf/nd96isr_h100_v5.conf`, `check_ib_bw_gdr 375`; `conf/nd96asr_v4.conf`, `check_ib_bw_gdr 185.0`),
94 % and 93 % of it. A bidirectional run (`-b`) prints both directions summed (perftest
`print_full_bw_report`), so it is held against twice the one-direction plateau: both directions of a
full-duplex port at once, never the duplex figure against a one-way run.
"""

from __future__ import annotations

from dataclasses import dataclass

IB_HEADER_BYTES = 26  # LRH 8 + BTH 12 + ICRC 4 + VCRC 2
ROCE_V2_HEADER_BYTES = 82  # preamble/SFD 8 + MAC 14 + FCS 4 + gap 12 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4
DEFAULT_MTU_BYTES = 4096
"""The RDMA MTU when the output prints none: ConnectX adapters' largest, which perftest picks by default
(the port's active MTU)."""
PLATEAU_FROM_BYTES = 65536
"""Messages from 64 KiB on are 16 packets or more at MTU 4096 and perftest's default size for its bandwidth
tests: their bandwidth is the plateau's (smaller messages are bound by the per-message cost, MsgRate)."""


@dataclass(frozen=True)
class NicPlateau:
    """The plateau a test of one port should reach, in GB/s, and how it was reached."""

    line_gbps: float  # one direction
    mtu_bytes: int
    header_bytes: int
    directions: int  # 2 for a bidirectional run

    @property
    def wire_efficiency(self) -> float:
        return self.mtu_bytes / (self.mtu_bytes + self.header_bytes)

    @property
    def allowed_gbps(self) -> float:
        """The line rate of the directions measured: what the datasheet figure gives."""
        return self.line_gbps * self.directions

    @property
    def plateau_gbps(self) -> float:
        return self.allowed_gbps * self.wire_efficiency


def header_bytes(link_layer: str | None) -> int:
    """Per-packet bytes beside the payload on this link layer (perftest's `Link type`: IB or Ethernet)."""
    return ROCE_V2_HEADER_BYTES if (link_layer or "").strip().lower() == "ethernet" else IB_HEADER_BYTES


def nic_plateau(
    line_gbps: float, mtu_bytes: int | None, link_layer: str | None, bidirectional: bool
) -> NicPlateau:
    """The plateau of a perftest bandwidth run on a port of `line_gbps` (GB/s, one direction)."""
    return NicPlateau(
        line_gbps, mtu_bytes or DEFAULT_MTU_BYTES, header_bytes(link_layer), 2 if bidirectional else 1
    )
