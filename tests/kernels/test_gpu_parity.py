"""The HIP-dialect sources on a real NVIDIA GPU: every decode and prefill variant, three format kinds.

Builds kernels/sources/hip/harness/cuda_parity.cu with nvcc (sm_90), runs each variant twice
(the second launch proves the split-K counters were left at zero; the outputs must agree bit for
bit), and scores against the FP32 reference (int8-activation bounds) and the exact int8 model.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kernels.cuda_parity import HARNESS, check, prepare
from kernels.families import FAMILIES
from kernels.formats.packed import KINDS
from kernels.formats.packing import format_kind

pytestmark = pytest.mark.gpu

CASES = [  # (format, phase, n, k, m): ragged N, K not a multiple of a prefill stage, M not a tile multiple
    ("Q8_0", "decode", 1000, 2560, 1), ("Q4_K", "decode", 333, 5120, 3), ("Q6_K", "decode", 97, 1024, 4),
    ("IQ4_NL", "prefill", 200, 1280, 37), ("Q4_K", "prefill", 130, 768, 130), ("Q6_K", "prefill", 64, 512, 2),
]  # fmt: skip


@pytest.fixture(scope="module")
def harnesses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    nvcc = shutil.which("nvcc")
    if nvcc is None or shutil.which("nvidia-smi") is None:
        pytest.skip("needs nvcc and an NVIDIA GPU")
    out: dict[str, Path] = {}
    folder = tmp_path_factory.mktemp("harness")
    for name, kind in KINDS.items():
        binary = folder / f"cuda_parity_{name}"
        defines = [f"-D{k}={v}" for k, v in kind.defines.items()]
        argv = [
            nvcc,
            "-arch=sm_90",
            "-O3",
            "-std=c++17",
            *defines,
            f"-I{HARNESS.parent.parent}",
            "-o",
            str(binary),
        ]
        proc = subprocess.run([*argv, str(HARNESS)], capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[name] = binary
    return out


@pytest.mark.parametrize(("fmt", "phase", "n", "k", "m"), CASES)
def test_every_variant_matches_reference_on_gpu(
    harnesses: dict[str, Path], tmp_path: Path, fmt: str, phase: str, n: int, k: int, m: int
) -> None:
    variants = FAMILIES[phase].space("cuda")
    problem = prepare(tmp_path, fmt, n, k, m, variants, seed=n)
    proc = subprocess.run(
        [str(harnesses[format_kind(fmt).name]), str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("same=1") == len(variants), proc.stdout  # deterministic, counters reset
    for row in check(tmp_path, problem, variants):
        assert row.passed, row
        assert row.model_rel < 1e-5, row  # the same integer math as kernels.activations.int8_gemm
