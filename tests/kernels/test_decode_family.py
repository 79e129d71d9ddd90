"""Decode family: declared spaces, canonical names, reasons for rejection."""

from __future__ import annotations

import pytest

from kernels.families import FAMILIES, family_for_phase
from kernels.families.base import InvalidVariant
from kernels.families.decode import DecodeFamily


def test_spaces() -> None:
    fam = DecodeFamily()
    gpu = fam.space("rocm")
    assert len(gpu) == 20 and [v.name for v in fam.space("cuda")] == [v.name for v in gpu]
    assert gpu[0].name == "KB1/TW4" and gpu[-1].name == "KB16/TW24"
    host = fam.space("host")
    assert [v.name for v in host] == [
        "KB1/TW4", "KB1/TW8", "KB2/TW4", "KB2/TW8", "KB4/TW4", "KB4/TW8", "KB8/TW4", "KB8/TW8",
    ]  # fmt: skip
    assert [v.order for v in host] == list(range(8))
    assert host[5].params == {"kb": 4, "tw": 8} and host[5].family == "decode"


def test_parse_roundtrip() -> None:
    fam = DecodeFamily()
    for backend in ("host", "rocm"):
        for v in fam.space(backend):
            assert fam.parse(v.name, backend) == v
    assert fam.parse("KB16/TW24", "rocm").params == {"kb": 16, "tw": 24}


@pytest.mark.parametrize(
    ("name", "backend", "reason"),
    [
        ("KB3/TW8", "rocm", "KB3/TW8: kb must be one of 1,2,4,8,16"),
        ("KB8/TW6", "cuda", "tw must be one of 4,8,12,24"),
        ("KB16/TW8", "host", "kb must be one of 1,2,4,8"),
        ("KB4/TW12", "host", "tw must be one of 4,8"),
        ("KB08/TW8", "rocm", "not canonical; write KB8/TW8"),
        ("kb8/tw8", "rocm", "expected KB{kb}/TW{tw}"),
        ("N128/MT32/MB1/U4", "rocm", "not a decode variant name"),
        ("KB8/TW8", "vulkan", "no space for backend 'vulkan'"),
    ],
)
def test_parse_errors_carry_reasons(name: str, backend: str, reason: str) -> None:
    with pytest.raises(InvalidVariant) as info:
        DecodeFamily().parse(name, backend)
    assert reason in str(info.value)


def test_both_axes_reported() -> None:
    with pytest.raises(InvalidVariant, match=r"kb must be .*; tw must be"):
        DecodeFamily().parse("KB3/TW5", "rocm")


def test_registry() -> None:
    assert FAMILIES["decode"].name == "decode"
    assert family_for_phase("decode").phase == "decode"
    with pytest.raises(KeyError, match="known phases: decode, prefill"):
        family_for_phase("sideways")
