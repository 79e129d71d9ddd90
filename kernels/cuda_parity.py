"""Prepare / check runs of the standalone CUDA parity harness (kernels/sources/hip/harness/cuda_parity.cu).

Lets the HIP-dialect sources be checked on an NVIDIA GPU without any Python CUDA binding:
``prepare`` writes the packed weights, activations and the launch list (geometry from
kernels/families/abi.py) into a directory, the harness binary runs every listed variant, and
``check`` scores each output against the FP32 reference and the int8-activation model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernels.activations import int8_gemm, quantize_activations
from kernels.families.abi import decode_launch, prefill_launch, symbol
from kernels.families.base import Variant
from kernels.reference import INT8_ACTIVATIONS, Problem, build_problem, score

HARNESS = Path(__file__).resolve().parent / "sources" / "hip" / "harness" / "cuda_parity.cu"


@dataclass
class ParityRow:
    symbol: str
    rel_l2: float
    passed: bool
    model_rel: float  # distance to the exact int8-activation model (kernels.activations.int8_gemm)


def prepare(
    out: Path,
    format_name: str,
    n: int,
    k: int,
    m: int,
    variants: list[Variant],
    sms: int = 132,
    seed: int = 0,
) -> Problem:
    """Write one problem and its launch list for ``variants`` (decode or prefill) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    p = build_problem(format_name, n, k, m, seed)
    assert p.packed is not None
    (out / "meta.txt").write_text(f"{m} {n} {k}\n")
    p.packed.qs.tofile(out / "qs.bin")
    p.packed.scales.view(np.uint16).tofile(out / "scales.bin")
    if p.packed.mins is not None:
        p.packed.mins.view(np.uint16).tofile(out / "mins.bin")
    np.ascontiguousarray(p.x).tofile(out / "x.bin")
    lines = []
    for v in variants:
        if v.family == "decode":
            d = decode_launch(n, k, m, v, compute_units=sms, wave_size=32)
            lines.append(
                f"{symbol(v)} {d.grid[0]} {d.grid[1]} {d.block[0]} {d.rows_per_wave} {d.counters} "
                f"{d.workspace_bytes // 4}"
            )
        else:
            g = prefill_launch(n, k, m, v, compute_units=sms, wave_size=32)
            lines.append(f"{symbol(v)} {g.grid[0]} {g.grid[1]} {g.block[0]} 1 0 0")
    (out / "launches.txt").write_text("\n".join(lines) + "\n")
    return p


def check(out: Path, problem: Problem, variants: list[Variant]) -> list[ParityRow]:
    """Score every ``y_<symbol>.bin`` the harness wrote (a missing file scores as NaN output)."""
    assert problem.packed is not None
    model = int8_gemm(problem.packed, quantize_activations(problem.x)).astype(np.float64)
    rows = []
    for v in variants:
        path = out / f"y_{symbol(v)}.bin"
        y = (
            np.fromfile(path, dtype=np.float32).reshape(problem.m, problem.n)
            if path.is_file()
            else np.full((problem.m, problem.n), np.nan, dtype=np.float32)
        )
        parity = score(problem.expected, y, INT8_ACTIVATIONS)
        model_rel = float(np.linalg.norm(y - model)) / max(float(np.linalg.norm(model)), 1e-30)
        rows.append(ParityRow(symbol(v), parity.rel_l2, parity.passed, model_rel))
    return rows
