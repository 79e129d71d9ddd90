"""Shared synthetic data for the table generator tests."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from service.tables.dialects import get_dialect
from service.tables.dialects.base import ReplayAnswers
from service.tables.model import CODEBOOK_FORMATS, MeasuredPoint, PointKey, PointTimes, TableChoice


def grid_points(
    times: Callable[[int, int, int], dict[str, float]],
    ms: Iterable[int],
    ns: Iterable[int],
    ks: Iterable[int],
    codebook: int = 0,
) -> list[MeasuredPoint]:
    """Measured points of a synthetic timing model on an M x N x K grid, each won by its fastest variant."""
    out = []
    for m in ms:
        for n in ns:
            for k in ks:
                t = times(m, n, k)
                out.append(MeasuredPoint(codebook, m, n, k, f"S{n}x{k}", min(t, key=t.__getitem__), t))
    return out


VARIANTS = [f"KB{kb}/TW{tw}" for kb in (1, 2, 4, 8) for tw in (4, 8)]
SHAPES = {
    "Qwen36_Attn_QKVProjection": (12288, 5120),
    "Qwen36_FFN_GateUp": (17408, 5120),
    "Qwen36_FFN_DownProjection": (5120, 17408),
    "Qwen36_GDN_TimeProjection": (1024, 5120),
    "Qwen36_GDN_OutputProjection": (5120, 6144),
    "Qwen36_LM_Head": (248320, 5120),
    "35BMoE_Expert_GateUp": (512, 2048),
    "Qwen36MoE_GDN_QKVProjection": (8192, 2048),
}
CODEBOOKS = (0, 5, 19)


def synthetic_time(cb: int, m: int, n: int, k: int, variant: str) -> float:
    """Deterministic pseudo-measurement: bandwidth-ish base times a variant factor."""
    digest = hashlib.sha256(f"{cb}/{m}/{n}/{k}/{variant}".encode()).digest()
    jitter = 0.7 + 0.6 * digest[0] / 255.0
    return round((n * k / 4e5 + 3.0 * m) * jitter, 3)


PREFILL_VARIANTS = [
    f"N{n}/MT{mt}/MB{mb}/U{u}" for n in (64, 128) for mt in (16, 32) for mb in (1, 2) for u in (2, 4)
]
PREFILL_M = (4, 64, 600, 2048)


def synthetic_data(
    variants: list[str] = VARIANTS, ms: tuple[int, ...] = (1, 2, 3, 4)
) -> tuple[list[TableChoice], list[PointTimes]]:
    """Winners (argmin) and every variant's time for CODEBOOKS x ms x SHAPES."""
    choices: list[TableChoice] = []
    times: list[PointTimes] = []
    for cb in CODEBOOKS:
        for m in ms:
            for shape, (n, k) in SHAPES.items():
                t = {v: synthetic_time(cb, m, n, k, v) for v in variants}
                best = min(sorted(t), key=lambda v: t[v])
                choices.append(TableChoice(cb, CODEBOOK_FORMATS[cb], m, n, k, shape, best, t[best]))
                times.append(PointTimes(cb, m, n, k, shape, t))
    return choices, times


@pytest.fixture(scope="session")
def data() -> tuple[list[TableChoice], list[PointTimes]]:
    return synthetic_data()


@pytest.fixture(scope="session")
def prefill_data() -> tuple[list[TableChoice], list[PointTimes]]:
    return synthetic_data(PREFILL_VARIANTS, PREFILL_M)


@pytest.fixture(scope="session")
def cxx() -> str:
    path = shutil.which("c++") or shutil.which("g++")
    if path is None:
        pytest.skip("no C++ compiler")
    return path


Replay = Callable[..., ReplayAnswers]


@pytest.fixture
def replay(cxx: str, tmp_path: Path) -> Replay:
    """Compile the dialect's replay driver against a table text and return its answers."""
    return lambda text, queries, dialect="llaminar-rocm-decode": _replay(
        cxx, text, queries, tmp_path, dialect
    )


def _replay(cxx: str, text: str, queries: list[PointKey], tmp: Path, name: str) -> ReplayAnswers:
    dialect = get_dialect(name)
    (tmp / "t.inc").write_text(text)
    (tmp / "r.cpp").write_text(dialect.replay_program("t.inc", queries))
    subprocess.run(
        [cxx, "-std=c++17", "-O0", "-I", str(tmp), str(tmp / "r.cpp"), "-o", str(tmp / "r")],
        check=True,
        timeout=120,
    )
    out = subprocess.run([str(tmp / "r")], check=True, capture_output=True, text=True, timeout=30)
    return dialect.parse_replay_output(out.stdout)
