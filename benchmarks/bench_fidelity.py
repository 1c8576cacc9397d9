"""How close the model's busbw comes to collective benchmarks that span nodes.

    python benchmarks/bench_fidelity.py                 # the corpus's multi-node outputs and the samples'
    python benchmarks/bench_fidelity.py --json

Every file is ingested by tracelog itself into a scratch store, as a user would, so each bench gets the
GPU, fabric and NICs its own lines say (nccl-tests device lines, NCCL's `NET/IB` line). What a file
does not say and its source does is given here (`GIVEN`), with that source. A bench is scored where it
spans nodes, by what `tracelog compare` and the `low_bandwidth` flag read: the measured peak busbw
over the model's plateau for the bench's placement (NCCL's cost model, textbook constants), and, for a
curve that stops short of its plateau, the measured over the predicted busbw at its largest size.
The issue's target: the all_reduce plateau within 20 % of measured. Published benches and the
samples' (whose curves are invented, docs/SAMPLES.md) are counted apart.

A bench whose source reports a fault is listed with it (`KNOWN`): the model predicts what the hardware
allows, so a fault is a gap for the flags, not an error of the model; it is counted apart.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tracelog import api, hardware
from tracelog.model.collectives import bench_placement, plateau_busbw
from tracelog.model.nvls import NcclOffer

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parent / "sample_logs"
DEFAULT_CORPUS = HERE.parents[1] / "shared" / "corpus"
TARGET = 0.20

# Multi-node collective outputs: corpus folder/file (public, see the corpus's SOURCES.md) or sample file.
CORPUS_FILES = (
    "nccl_tests/dgxspark_gb10_allgather_two_runs.txt",
    "allreduce_bench/bigscience_all_reduce_bench-a100-n4.txt",
)
SAMPLE_FILES = (
    "nccl_mpi_all_reduce_2x8xh100.txt",
    "nccl_split_per_iter_cputime_2x4xh100.txt",
    "nccl_tests_all_reduce_per_iter_2x4xh100.json",
)
# What a file does not print and its source says, by file name: `tracelog set` options.
GIVEN = {
    # The job script beside it in bigscience-workshop/bigscience (experiments/bandwidth/
    # all_reduce_bench-a100-n4.slurm) runs on Jean Zay's `gpu_p5` partition, `--gres=gpu:8`: the
    # A100 80GB nodes BLOOM trained on (BLOOM model card, "Hardware"). Its NCCL lines name the fabric.
    "bigscience_all_reduce_bench-a100-n4.txt": {"gpu": "a100-sxm4-80gb"},
}
# Faults the source reports, by (file name, bench's order in the file).
KNOWN = {
    (
        "dgxspark_gb10_allgather_two_runs.txt",
        1,
    ): "the second run of the notes: a cable/FEC fault (corpus SOURCES.md)",
    ("bigscience_all_reduce_bench-a100-n4.txt", 0): (
        "BigScience's experiments/bandwidth/README.md: 'an issue with nccl that doesn't fully utilize "
        "Intel OPA full bandwidth'"
    ),
}

# Published peak busbw figures whose source states the hardware but gives no output file to ingest: the
# plateau is computed by the model directly. `sets` marks the figure a constant was taken from (scored
# apart: it cannot test the model). NCCL's choices the source states are given as `offer`.
PUBLISHED_FIGURES: tuple[dict[str, Any], ...] = (
    {
        "source": "NVIDIA/nccl-tests#212: NCCL's maintainers, 8 x H100 all_reduce with NVLink SHARP '~480GB/s'",
        "gpu": "h100-sxm5-80gb",
        "nodes": 1,
        "per_node": 8,
        "fabric": None,
        "offer": {},
        "measured": 480.0,
        "sets": "NVLS_ALGBW_SHARE (hopper)",
    },
    {
        "source": "NVIDIA/nccl#1047: 8 x H100, reduce_scatter on the ring NCCL picks for it, 362.16 GB/s at 8 GiB",
        "op": "reduce_scatter",
        "gpu": "h100-sxm5-80gb",
        "nodes": 1,
        "per_node": 8,
        "fabric": None,
        "offer": {"algo": "Ring"},
        "measured": 362.16,
    },
    {
        "source": "NVIDIA/nccl-tests#212: the same, 'when running with NCCL_ALGO=RING' '370GB/s'",
        "gpu": "h100-sxm5-80gb",
        "nodes": 1,
        "per_node": 8,
        "fabric": None,
        "offer": {"algo": "Ring"},
        "measured": 370.0,
    },
    {
        "source": "NVIDIA/nccl-tests#272: 8 x H200, NCCL 2.20.3, peak 475 GB/s",
        "gpu": "h200-sxm-141gb",
        "nodes": 1,
        "per_node": 8,
        "fabric": None,
        "offer": {"version": (2, 20)},
        "measured": 475.0,
    },
    {
        "source": "NVIDIA/nccl#1374: 8 x H800, 215 GB/s",
        "gpu": "h800-sxm5-80gb",
        "nodes": 1,
        "per_node": 8,
        "fabric": None,
        "offer": {},
        "measured": 215.0,
    },
    {
        "source": "NVIDIA/nccl#1807: 8 x B200, NCCL 2.27.1, '830+'",
        "gpu": "b200-sxm-180gb",
        "nodes": 1,
        "per_node": 8,
        "fabric": None,
        "offer": {"version": (2, 27)},
        "measured": 830.0,
    },
    {
        "source": "NVIDIA/nccl#1221: 2 nodes of 8 x H100, 8 x 400 Gb RoCE, NCCL 2.19.3, NCCL_NVLS_ENABLE=1: 430 GB/s",
        "gpu": "h100-sxm5-80gb",
        "nodes": 2,
        "per_node": 8,
        "fabric": "roce-400g-x8",
        "offer": {"version": (2, 19), "nvls_enable": "1"},
        "measured": 430.0,
    },
    {
        "source": "NVIDIA/nccl#1221: the same with NCCL_NVLS_ENABLE=0: 330 GB/s",
        "gpu": "h100-sxm5-80gb",
        "nodes": 2,
        "per_node": 8,
        "fabric": "roce-400g-x8",
        "offer": {"version": (2, 19), "nvls_enable": "0"},
        "measured": 330.0,
    },
    {
        "source": "NVIDIA/nccl#1221: 4 nodes, NVLS on or off: 320 GB/s",
        "gpu": "h100-sxm5-80gb",
        "nodes": 4,
        "per_node": 8,
        "fabric": "roce-400g-x8",
        "offer": {"version": (2, 19)},
        "measured": 320.0,
    },
    {
        "source": (
            "coreweave/nccl-tests#43: a GB200 NVL72 rack, 72 ranks on 18 hosts of 4 GPUs in one NVLink domain, "
            "busbw 846.82 GB/s in place at 8 GiB (839.16 out of place at 4 GiB)"
        ),
        "gpu": "gb200",
        "nodes": 18,
        "per_node": 4,
        "fabric": None,
        "offer": {},
        "measured": 846.82,
    },
)

BENCHES_SQL = """
SELECT b.bench_id, s.path, b.collective, b.ranks, b.nodes, coalesce(b.gpu_model, b.gpu_name) AS gpu,
       json_extract_string(p.detail, '$.fabric') AS fabric, c.measured AS peak, c.predicted AS plateau,
       c.formula, row_number() OVER (PARTITION BY b.source_id ORDER BY b.bench_id) - 1 AS nth
FROM benches b JOIN sources s USING (source_id)
LEFT JOIN comparisons c ON c.subject_kind = 'collective' AND c.subject_id = b.bench_id
     AND c.metric = 'peak_busbw_gbps'
LEFT JOIN predictions p ON p.subject_kind = 'collective' AND p.subject_id = b.bench_id
     AND p.metric = 'model_plateau_busbw_gbps'
ORDER BY b.bench_id
"""
LAST_SIZE_SQL = """
WITH last AS (
    SELECT bench_id, max(size_bytes) AS size FROM collectives WHERE bench_id = $bench GROUP BY bench_id
)
SELECT l.size, max(c.busbw_gbps) AS measured,
       (SELECT max(p.value) FROM predictions p WHERE p.subject_kind = 'collective' AND p.subject_id = $bench
        AND p.metric = 'busbw_gbps' AND CAST(json_extract(p.detail, '$.size_bytes') AS BIGINT) = l.size)
        AS predicted
FROM last l JOIN collectives c ON c.bench_id = l.bench_id AND c.size_bytes = l.size
GROUP BY l.size
"""


def files(corpus: Path | None) -> list[tuple[str, Path]]:
    """(kind, path) of every file scored: the corpus's where present, then the samples."""
    found = [("corpus", corpus / f) for f in CORPUS_FILES] if corpus is not None else []
    found = [(k, p) for k, p in found if p.is_file()]
    return found + [("sample", SAMPLES / f) for f in SAMPLE_FILES]


def score(corpus: Path | None = DEFAULT_CORPUS) -> dict[str, Any]:
    """Ingest the files into a scratch store and score every bench that spans nodes."""
    scored = files(corpus)
    kinds = {p.name: k for k, p in scored}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "benches.duckdb"
        api.ingest(db, [str(p) for _, p in scored])
        for bench in api.sql(
            db, "SELECT bench_id, path FROM benches JOIN sources USING (source_id)"
        ).itertuples():
            given = GIVEN.get(Path(bench.path).name)
            if given:
                api.set_hardware(db, f"bench:{bench.bench_id}", **given)
        for raw in api.sql(db, BENCHES_SQL).to_dict("records"):
            rec = {k: None if v is None or v != v else v for k, v in raw.items()}  # NaN/NA: None
            if not rec["nodes"] or rec["nodes"] < 2:
                continue
            name = Path(rec["path"]).name
            last = api.sql(db, LAST_SIZE_SQL.replace("$bench", str(int(rec["bench_id"])))).to_dict("records")
            at = last[0] if last else {}
            peak, plateau = rec["peak"], rec["plateau"]
            rows.append(
                {
                    "file": name,
                    "kind": kinds.get(name, "?"),
                    "bench": int(rec["nth"]),
                    "op": rec["collective"],
                    "ranks": int(rec["ranks"]),
                    "nodes": int(rec["nodes"]),
                    "gpu": rec["gpu"],
                    "fabric": rec["fabric"],
                    "measured_peak": peak,
                    "model_plateau": plateau,
                    "ratio": None if peak is None or not plateau else peak / plateau,
                    "how": rec["formula"],
                    "largest_size": at.get("size"),
                    "ratio_at_largest": (
                        at["measured"] / at["predicted"]
                        if at.get("predicted") and at.get("measured")
                        else None
                    ),
                    "known_fault": KNOWN.get((name, int(rec["nth"]))),
                }
            )

    def part(kind: str) -> dict[str, Any]:
        clean = [r for r in rows if r["kind"] == kind and not r["known_fault"] and r["ratio"] is not None]
        within = [r for r in clean if abs(r["ratio"] - 1) <= TARGET]
        ops = sorted({r["op"] for r in clean})
        reduce = [r for r in clean if r["op"] == "all_reduce"]
        return {
            "n": len(clean),
            "within": len(within),
            "ops": ops,
            "all_reduce": len(reduce),
            "all_reduce_within": sum(abs(r["ratio"] - 1) <= TARGET for r in reduce),
        }

    figures = published_figures()
    return {
        "benches": rows,
        "target": TARGET,
        "corpus": part("corpus"),
        "sample": part("sample"),
        "published_figures": figures,
    }


def published_figures() -> list[dict[str, Any]]:
    """Each of `PUBLISHED_FIGURES` against the model's all_reduce plateau for its hardware."""
    out = []
    for fig in PUBLISHED_FIGURES:
        ranks = fig["nodes"] * fig["per_node"]
        offer = NcclOffer(**fig["offer"])
        fabric = hardware.fabric_of(fig["fabric"], None) if fig["fabric"] else None
        place, _ = bench_placement(
            hardware.gpu(fig["gpu"]),
            ranks,
            fig["nodes"],
            fig["per_node"],
            fabric,
            offer.allowed(fig.get("op", "all_reduce")),
        )
        plateau, best = plateau_busbw(fig.get("op", "all_reduce"), place)
        out.append(
            {
                "source": fig["source"],
                "op": fig.get("op", "all_reduce"),
                "nodes": fig["nodes"],
                "ranks": ranks,
                "measured": fig["measured"],
                "model": plateau,
                "algorithm": best.name,
                "ratio": fig["measured"] / plateau,
                "sets": fig.get("sets"),
            }
        )
    return out


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render(result: dict[str, Any]) -> str:
    lines = ["collectives across nodes: measured peak busbw / model plateau (GB/s)"]
    for r in result["benches"]:
        fabric = r["fabric"] or "?"
        lines.append(
            f"  {r['kind']:<6} {r['file']:<44} #{r['bench']} {r['op']:<10} {r['ranks']:>3} ranks on {r['nodes']} nodes "
            f"({r['gpu'] or '?'}, {fabric}): {_num(r['measured_peak'], '.1f')} / {_num(r['model_plateau'], '.1f')} "
            f"= {_num(r['ratio'], '.2f')}; at the largest size {_num(r['ratio_at_largest'], '.2f')}"
        )
        if r["known_fault"]:
            lines.append(f"         known fault: {r['known_fault']}")
    for kind, what in (("corpus", "published"), ("sample", "invented samples (their curves are made up)")):
        p = result[kind]
        lines.append(
            f"{what}, without a known fault: {p['within']} of {p['n']} within {result['target']:.0%} "
            f"({', '.join(p['ops']) or 'none'}); all_reduce {p['all_reduce_within']} of {p['all_reduce']}"
        )
    lines.append("published figures (no file; the model's plateau for the hardware they state):")
    for f in result["published_figures"]:
        lines.append(
            f"  {f['op']:<14} {f['ranks']:>3} ranks on {f['nodes']} node(s): {f['measured']:.0f} / "
            f"{f['model']:.0f} ({f['algorithm']}) = {f['ratio']:.2f}  {f['source']}"
        )
        if f["sets"]:
            lines.append(f"         sets {f['sets']}: not a test of the model")
    tested = [f for f in result["published_figures"] if not f["sets"]]
    for label, group in (
        ("one node", [f for f in tested if f["nodes"] == 1]),
        ("across nodes", [f for f in tested if f["nodes"] > 1]),
    ):
        within = sum(abs(f["ratio"] - 1) <= result["target"] for f in group)
        lines.append(f"published figures, {label}: {within} of {len(group)} within {result['target']:.0%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="the shared corpus folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = score(args.corpus)
    print(json.dumps(result, indent=2, default=float) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
