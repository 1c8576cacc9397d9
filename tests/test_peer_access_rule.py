"""The peer-access flag from `nvidia-smi topo -p2p` matrices."""

from __future__ import annotations

from pathlib import Path

from tests.test_parser_topo import P2P_RW
from tracelog import api


def _flags(tmp_path: Path, text: str) -> list[dict]:
    path = tmp_path / "topo.txt"
    path.write_text(text)
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(path)])
    return api.flags(db).to_dict("records")


def test_pairs_without_peer_access_are_named_once_each(tmp_path: Path) -> None:
    (flag,) = _flags(tmp_path, P2P_RW)
    assert (flag["rule"], flag["severity"], flag["subject"]) == ("p2p_unsupported", "info", "bench 2")
    assert flag["message"] == (
        "nvidia-smi topo -p2p rw: 3 of 6 GPU pairs have no peer access (CNS: chipset not supported): "
        "GPU0-GPU3, GPU1-GPU3, GPU2-GPU3."
    )
    assert flag["row_ref"] == "line 10" and flag["measured"] == 3.0  # GPU0's row, the first with one


def test_a_matrix_of_ok_pairs_raises_nothing(tmp_path: Path) -> None:
    assert _flags(tmp_path, P2P_RW.replace("CNS\t", "OK\t")) == []
