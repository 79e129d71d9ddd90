"""Occupancy against hand-computed cases, one set per arch (arithmetic written out per case)."""

from __future__ import annotations

import pytest

from workers.isa.occupancy import occupancy


@pytest.mark.parametrize(
    ("arch", "vgpr", "agpr", "sgpr", "lds", "wg", "waves", "limiter"),
    [
        # gfx906: 256 VGPRs, granule 4, cap 10.
        ("gfx906", 24, 0, 20, 0, 256, 10, "max_waves"),  # 256 // 24 = 10 → cap 10
        ("gfx906", 25, 0, 20, 0, 256, 9, "vgpr"),  # align(25, 4) = 28; 256 // 28 = 9
        ("gfx906", 130, 0, 20, 0, 256, 1, "vgpr"),  # align(130, 4) = 132; 256 // 132 = 1
        ("gfx906", 128, 0, 20, 0, 256, 2, "vgpr"),  # 256 // 128 = 2
        ("gfx906", 16, 0, 94, 0, 256, 8, "sgpr"),  # 94 SGPRs: 88 < 94 <= 100 → 8 waves
        ("gfx906", 16, 0, 81, 0, 256, 9, "sgpr"),  # 80 < 81 <= 88 → 9 waves
        # 40 KiB LDS: align(40960, 512) = 40960; 65536 // 40960 = 1 workgroup/CU; 4 waves / 4 SIMDs = 1
        ("gfx906", 16, 0, 20, 40 * 1024, 256, 1, "lds"),
        # 64-thread workgroups: 1 wave each, 40 per CU → 40 waves / 4 SIMDs = 10 (no limit)
        ("gfx906", 16, 0, 20, 0, 64, 10, "max_waves"),
        # 128 threads = 2 waves: min(16, 40 // 2) = 16 workgroups → 32 waves / 4 = 8 per SIMD
        ("gfx906", 16, 0, 20, 0, 128, 8, "workgroup"),
        # gfx90a: 512 unified, granule 8, cap 8.
        ("gfx90a", 64, 0, 20, 0, 256, 8, "max_waves"),  # 512 // 64 = 8
        ("gfx90a", 65, 0, 20, 0, 256, 7, "vgpr"),  # align(65, 8) = 72; 512 // 72 = 7
        ("gfx90a", 130, 0, 20, 0, 256, 3, "vgpr"),  # align(130, 8) = 136; 512 // 136 = 3
        ("gfx90a", 130, 64, 20, 0, 256, 2, "vgpr"),  # align(130, 4) + 64 = 196 → 200; 512 // 200 = 2
        ("gfx90a", 256, 256, 20, 0, 256, 1, "vgpr"),  # 256 + 256 = 512; 512 // 512 = 1
        ("gfx90a", 16, 0, 102, 0, 256, 7, "sgpr"),  # > 100 SGPRs → 7 waves
        # gfx942: same register file as gfx90a, 64 KiB LDS.
        ("gfx942", 96, 0, 20, 0, 256, 5, "vgpr"),  # 512 // 96 = 5
        ("gfx942", 32, 0, 20, 20 * 1024, 256, 3, "lds"),  # 65536 // 20480 = 3 workgroups × 4 waves / 4 = 3
        ("gfx942", 32, 0, 20, 32 * 1024, 512, 4, "lds"),  # 2 workgroups × 8 waves / 4 = 4
        # gfx950: 160 KiB LDS per CU.
        ("gfx950", 32, 0, 20, 40 * 1024, 256, 4, "lds"),  # 163840 // 40960 = 4 workgroups × 4 waves / 4 = 4
        ("gfx950", 32, 0, 20, 20 * 1024, 256, 8, "max_waves"),  # 8 workgroups × 4 / 4 = 8 = cap
        ("gfx950", 170, 0, 20, 0, 256, 2, "vgpr"),  # align(170, 8) = 176; 512 // 176 = 2
    ],
)
def test_hand_computed(
    arch: str, vgpr: int, agpr: int, sgpr: int, lds: int, wg: int, waves: int, limiter: str
) -> None:
    occ = occupancy(arch, vgpr, agpr, sgpr, lds, wg)
    assert (occ.waves_per_simd, occ.limiter) == (waves, limiter)


def test_unknown_arch() -> None:
    with pytest.raises(KeyError, match="gfx1234"):
        occupancy("gfx1234", 1, 0, 1, 0, 64)
