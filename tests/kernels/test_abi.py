"""The kernel ABI as data (kernels/families/abi.py) agrees with the sources and with itself."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from kernels.families import FAMILIES
from kernels.families.abi import ARGS, SOURCES, THREADS, decode_launch, prefill_launch, symbol

HIP = Path(__file__).resolve().parents[2] / "kernels" / "sources" / "hip"
_ARG_LINE = re.compile(r"^ \*\s+(\d+)\s+((?:const )?\w+)\s+(\*?)(\w+)\s", re.MULTILINE)


@pytest.mark.parametrize("family", ["decode", "prefill"])
def test_source_comment_lists_the_same_arguments(family: str) -> None:
    text = (HIP / SOURCES[family]).read_text()
    header = text.split("*/", 1)[0]
    found = [(int(i), f"{t} {star}".strip(), name) for i, t, star, name in _ARG_LINE.findall(header)]
    expected = [(i, a.ctype, a.name) for i, a in enumerate(ARGS[family])]
    assert found == expected
    params = re.search(rf"#define TB_{family.upper()}_PARAMS(.*?)\n\n", text, re.S)
    assert params is not None
    names = re.findall(r"(\w+)\s*(?:,|\\|$)", params.group(1).replace("__restrict__", ""))
    assert [n for n in names if n in {a.name for a in ARGS[family]}] == [a.name for a in ARGS[family]]


def test_symbols_are_exported_names() -> None:
    fam = FAMILIES["decode"]
    assert symbol(fam.parse("KB16/TW24", "rocm")) == "tb_decode_kb16_tw24"
    pre = FAMILIES["prefill"].parse("N128/MT32/MB2/U4", "cuda")
    assert symbol(pre) == "tb_prefill_n128_mt32_mb2_u4"
    src = (HIP / "decode.hip").read_text()
    assert "tb_decode_kb##KB##_tw##TW" in src


@pytest.mark.parametrize("wave", [32, 64])
@pytest.mark.parametrize(
    ("n", "k", "m"), [(17408, 5120, 1), (1024, 5120, 4), (67, 256, 2), (248320, 5120, 3)]
)
def test_decode_launch_covers_every_row_once(wave: int, n: int, k: int, m: int) -> None:
    for v in FAMILIES["decode"].space("rocm"):
        launch = decode_launch(n, k, m, v, compute_units=60, wave_size=wave)
        grid, block, shared = launch
        kb, tw = v.params["kb"], v.params["tw"]
        assert block == (THREADS, 1, 1) and shared == 0 and grid[1] == kb and grid[2] == 1
        rows_per_wg = launch.rows_per_wave * THREADS // wave
        assert grid[0] == math.ceil(n / rows_per_wg) and (grid[0] - 1) * rows_per_wg < n
        waves = grid[0] * grid[1] * THREADS // wave
        assert waves >= min(tw * 60, math.ceil(n / launch.rows_per_wave))  # the occupancy target is met
        assert launch.workspace_bytes == (4 * kb * m * n if kb > 1 else 0)
        assert launch.counters == (grid[0] if kb > 1 else 0)
        assert launch.scalars == {"m": m, "n": n, "k": k, "rows_per_wave": launch.rows_per_wave}


def test_decode_launch_keyword_form_and_errors() -> None:
    a = decode_launch(4096, 5120, 2, "KB4/TW8", compute_units=132, wave_size=32)
    b = decode_launch(kb=4, tw=8, n=4096, k=5120, m=2, compute_units=132, wave=32)
    assert a == b
    with pytest.raises(ValueError, match=r"M = 1\.\.4"):
        decode_launch(64, 256, 5, "KB1/TW4", compute_units=8, wave_size=64)
    with pytest.raises(ValueError, match="wave size"):
        decode_launch(64, 256, 1, "KB1/TW4", compute_units=8, wave_size=48)
    with pytest.raises(TypeError):
        decode_launch(64, 256, 1, compute_units=8, wave_size=64)


def test_prefill_launch_tiles() -> None:
    g = prefill_launch(17408, 5120, 600, "N128/MT32/MB1/U4", compute_units=304, wave_size=64)
    assert g.grid == (136, 19, 1) and g.block == (256, 1, 1) and g.shared_bytes == 0
    assert prefill_launch(10, 64, 3, "N64/MT64/MB2/U0").grid == (1, 1, 1)
