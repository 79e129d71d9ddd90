"""tb_formats.h through its host twin: every format, every permute style (portable, NVIDIA prmt, AMD
v_perm emulated bit-exactly), dequantised chunk by chunk == gguf bit for bit; chunk dots == the int8 model."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import quants

from kernels.activations import quantize_activations
from kernels.formats.registry import get_format
from kernels.formats.split import split_blocks
from kernels.packages.layouts import layout_for
from kernels.packages.loader import INCLUDE_DIR
from kernels.reference import quantize_random

FORMATS = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q4_K", "Q6_K", "IQ4_XS")
TWIN = Path(__file__).resolve().parents[1] / "fixtures" / "formats" / "dequant_twin.c"
F32P = ctypes.POINTER(ctypes.c_float)


def _build(tmp: Path, name: str, style: int) -> ctypes.CDLL:
    defines = layout_for("tb-split").defines(get_format(name))
    out = tmp / f"twin_{name}_{style}.so"
    argv = ["cc", "-O1", "-std=c11", "-fPIC", "-shared", "-Wall", "-Werror", "-Wno-unused-function",
            f"-DTB_PERM_STYLE={style}", *(f"-D{k}={v}" for k, v in defines.items()),
            f"-I{INCLUDE_DIR}", "-o", str(out), str(TWIN), "-lm"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return ctypes.CDLL(str(out))


def _ptr(a: np.ndarray | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(0 if a is None else a.ctypes.data)


@pytest.mark.parametrize("name", FORMATS)
def test_twin_dequant_and_dot(tmp_path: Path, name: str) -> None:
    fmt = get_format(name)
    n, k = 6, 512
    blocks = quantize_random(fmt, n, k, seed=21)
    parts = split_blocks(fmt, blocks)
    expected = quants.dequantize(blocks, fmt.ggml_type)
    x = np.random.default_rng(4).standard_normal((1, k), dtype=np.float32)
    qa = quantize_activations(x)
    xs = np.ascontiguousarray(qa.xs[0], dtype=np.float32)
    xd = np.ascontiguousarray(qa.xs[0] * qa.xsum[0].astype(np.float32), dtype=np.float32)
    xq = np.ascontiguousarray(qa.xq[0])
    # the int8 model: dequantised weights against the rounded activations, in float64
    xr = (qa.xq[0].astype(np.float64).reshape(-1, 32) * qa.xs[0].astype(np.float64)[:, None]).ravel()
    model = expected.astype(np.float64) @ xr
    for style in (0, 1, 2):
        lib = _build(tmp_path, name, style)
        assert lib.tb_twin_slots_ok(k) == 1  # the x slot of every (chunk, run), as decode.hip stages x
        got = np.full((n, k), np.nan, dtype=np.float32)
        lib.tb_twin_dequant(_ptr(parts["qs"]), _ptr(parts["qh"]), _ptr(parts["sc"]), n, k, _ptr(got))
        assert np.array_equal(got.view(np.uint32), expected.view(np.uint32)), f"style {style}"
        y = np.full(n, np.nan, dtype=np.float32)
        lib.tb_twin_dot(_ptr(parts["qs"]), _ptr(parts["qh"]), _ptr(parts["sc"]), n, k, _ptr(xq), _ptr(xs),
                        _ptr(xd), _ptr(y))  # fmt: skip
        np.testing.assert_allclose(y, model, rtol=2e-5, atol=2e-4 * float(np.abs(model).max()))
