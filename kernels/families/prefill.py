"""The prefill (GEMM, M buckets) kernel family: variants ``N{n_tile}/MT{m_tile}/MB{min_blocks}/U{unroll}``.

GPU meaning (kernels/sources/hip/prefill.hip): ``n_tile`` weight rows and ``m_tile``
activation rows per 256-thread workgroup tile, ``min_blocks`` the second argument of
``__launch_bounds__``, ``unroll`` the unroll factor of the K-block loop inside one LDS stage
(0 = compiler's choice). Space: n in {64,128} x m in {16,32,64} x mb in {1,2} x u in
{0,1,2,4}, minus N128/MT64 (40 variants).

Host meaning (kernels/sources/host/prefill_gemm.c): the same tile sizes for CPU cache
blocking; ``min_blocks`` has no CPU meaning (only MB1) and ``unroll`` is the unroll of the
K-block loop (0 = compiler's choice, 2). Host space: n in {64,128} x m in {16,32} x MB1 x
u in {0,2} (8 variants).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from kernels.families.base import InvalidVariant, Variant, resolve_variant

GPU_BACKENDS: frozenset[str] = frozenset({"rocm", "cuda"})
AXES_GPU: dict[str, tuple[int, ...]] = {"n": (64, 128), "m": (16, 32, 64), "mb": (1, 2), "u": (0, 1, 2, 4)}
AXES_HOST: dict[str, tuple[int, ...]] = {"n": (64, 128), "m": (16, 32), "mb": (1,), "u": (0, 2)}

_NAME_RE = re.compile(r"^N(\d+)/MT(\d+)/MB(\d+)/U(\d+)$")

Params = tuple[int, int, int, int]  # (n_tile, m_tile, min_blocks, unroll)


def variant_name(n: int, m: int, mb: int, u: int) -> str:
    """The canonical name of a prefill point."""
    return f"N{n}/MT{m}/MB{mb}/U{u}"


@dataclass(frozen=True)
class Constraint:
    """A rule every valid point satisfies; ``reason`` is the message when it does not."""

    check: Callable[[Params], bool]
    reason: str


def _axes(backend: str) -> dict[str, tuple[int, ...]]:
    if backend == "host":
        return AXES_HOST
    if backend in GPU_BACKENDS:
        return AXES_GPU
    raise InvalidVariant(f"prefill family has no space for backend {backend!r} (known: cuda, host, rocm)")


def _one_of(values: tuple[int, ...]) -> str:
    return ",".join(map(str, values))


def constraints(backend: str) -> list[Constraint]:
    """Declared constraints of the prefill space for one backend."""
    ax = _axes(backend)
    why = (
        "host kernels are generated for these only"
        if backend == "host"
        else "template instantiated for these"
    )
    rules = [
        Constraint(lambda p: p[0] in ax["n"], f"n_tile must be one of {_one_of(ax['n'])} ({why})"),
        Constraint(lambda p: p[1] in ax["m"], f"m_tile must be one of {_one_of(ax['m'])} ({why})"),
        Constraint(lambda p: p[2] in ax["mb"], f"min_blocks must be one of {_one_of(ax['mb'])} ({why})"),
        Constraint(lambda p: p[3] in ax["u"], f"unroll must be one of {_one_of(ax['u'])} ({why})"),
    ]
    if backend in GPU_BACKENDS:
        rules.append(
            Constraint(
                lambda p: not (p[0] == 128 and p[1] == 64),
                "N128/MT64 is invalid: 32 accumulators per thread plus staging registers exceed the "
                "register budget (2 x 16 tile per thread at 256 threads)",
            )
        )
    return rules


def _valid(params: Params, backend: str) -> list[str]:
    return [c.reason for c in constraints(backend) if not c.check(params)]


class PrefillFamily:
    """Prefill GEMM family; stateless, safe to share."""

    name: str = "prefill"
    phase: str = "prefill"

    def space(self, backend: str) -> list[Variant]:
        """All valid points, simplest first (smaller tiles, MB1, fewer unrolls first)."""
        ax = _axes(backend)
        points = [
            (n, m, mb, u)
            for n in ax["n"]
            for m in ax["m"]
            for mb in ax["mb"]
            for u in ax["u"]
            if not _valid((n, m, mb, u), backend)
        ]
        return [
            Variant(
                self.name,
                variant_name(*p),
                {"n_tile": p[0], "m_tile": p[1], "min_blocks": p[2], "unroll": p[3]},
                i,
            )
            for i, p in enumerate(points)
        ]

    def parse(self, name: str, backend: str) -> Variant:
        """Parse ``N{n}/MT{m}/MB{mb}/U{u}``; InvalidVariant says which rule failed."""
        match = _NAME_RE.match(name)
        if match is None:
            raise InvalidVariant(
                f"{name!r} is not a prefill variant name; expected N{{n}}/MT{{m}}/MB{{mb}}/U{{u}}, "
                "e.g. N128/MT32/MB1/U4"
            )
        p: Params = (int(match.group(1)), int(match.group(2)), int(match.group(3)), int(match.group(4)))
        return resolve_variant(name, variant_name(*p), lambda: _valid(p, backend), self.space, backend)
