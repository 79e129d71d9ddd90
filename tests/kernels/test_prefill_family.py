"""Prefill family: declared spaces, the N128/MT64 exclusion, reasons for rejection."""

from __future__ import annotations

import pytest

from kernels.families import FAMILIES, family_for_phase
from kernels.families.base import InvalidVariant
from kernels.families.prefill import PrefillFamily


def test_gpu_space() -> None:
    fam = PrefillFamily()
    gpu = fam.space("rocm")
    assert len(gpu) == 2 * 3 * 2 * 4 - 2 * 4  # minus N128/MT64 x MB x U
    assert [v.name for v in fam.space("cuda")] == [v.name for v in gpu]
    assert gpu[0].name == "N64/MT16/MB1/U0" and gpu[-1].name == "N128/MT32/MB2/U4"
    assert not any(v.name.startswith("N128/MT64") for v in gpu)
    assert [v.order for v in gpu] == list(range(len(gpu)))
    assert gpu[5].params == {"n_tile": 64, "m_tile": 16, "min_blocks": 2, "unroll": 1}


def test_host_space() -> None:
    names = [v.name for v in PrefillFamily().space("host")]
    assert names == [
        "N64/MT16/MB1/U0", "N64/MT16/MB1/U2", "N64/MT32/MB1/U0", "N64/MT32/MB1/U2",
        "N128/MT16/MB1/U0", "N128/MT16/MB1/U2", "N128/MT32/MB1/U0", "N128/MT32/MB1/U2",
    ]  # fmt: skip


def test_parse_roundtrip() -> None:
    fam = PrefillFamily()
    for backend in ("host", "rocm", "cuda"):
        for v in fam.space(backend):
            assert fam.parse(v.name, backend) == v


@pytest.mark.parametrize(
    ("name", "backend", "reason"),
    [
        ("N128/MT64/MB1/U0", "rocm", "N128/MT64 is invalid: 32 accumulators"),
        ("N96/MT32/MB1/U0", "cuda", "n_tile must be one of 64,128"),
        ("N64/MT8/MB1/U0", "rocm", "m_tile must be one of 16,32,64"),
        ("N64/MT16/MB3/U0", "rocm", "min_blocks must be one of 1,2"),
        ("N64/MT16/MB1/U3", "rocm", "unroll must be one of 0,1,2,4"),
        ("N64/MT64/MB1/U0", "host", "m_tile must be one of 16,32"),
        ("N64/MT16/MB2/U0", "host", "min_blocks must be one of 1"),
        ("N064/MT16/MB1/U0", "rocm", "not canonical; write N64/MT16/MB1/U0"),
        ("KB8/TW8", "rocm", "not a prefill variant name"),
        ("N64/MT16/MB1/U0", "vulkan", "no space for backend 'vulkan'"),
    ],
)
def test_parse_errors_carry_reasons(name: str, backend: str, reason: str) -> None:
    with pytest.raises(InvalidVariant) as info:
        PrefillFamily().parse(name, backend)
    assert reason in str(info.value)


def test_registered_for_its_phase() -> None:
    assert FAMILIES["prefill"].name == "prefill"
    assert family_for_phase("prefill").phase == "prefill"
