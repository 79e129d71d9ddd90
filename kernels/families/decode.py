"""The decode (GEMV, M = 1..4) kernel family: variants ``KB{kb}/TW{tw}``.

On GPUs (rocm, cuda) the parameters are those of the Llaminar NativeVNNI decode
kernel: ``kb`` = K blocks each lane consumes per step, ``tw`` = target waves per
compute unit (occupancy target). The full GPU space is kb in {1,2,4,8,16} x
tw in {4,8,12,24}.

On the host backend the same names are reused with a CPU meaning, so one table
schema covers both:

* ``kb`` = number of independent K-block partial sums kept per output row
  (split-K depth inside a row, i.e. instruction-level parallelism: block b of a
  row accumulates into partial sum b mod kb; the partial sums are added at the end);
* ``tw`` = rows computed per tile: ``tw`` weight rows share one pass over the
  activation blocks, so each activation block is reused ``tw`` times from L1.

The host space is kb in {1,2,4,8} x tw in {4,8} (8 variants); larger values only
spill registers on a CPU.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from kernels.families.base import InvalidVariant, Variant, resolve_variant

GPU_BACKENDS: frozenset[str] = frozenset({"rocm", "cuda"})
GPU_KB: tuple[int, ...] = (1, 2, 4, 8, 16)
GPU_TW: tuple[int, ...] = (4, 8, 12, 24)
HOST_KB: tuple[int, ...] = (1, 2, 4, 8)
HOST_TW: tuple[int, ...] = (4, 8)

_NAME_RE = re.compile(r"^KB(\d+)/TW(\d+)$")


def variant_name(kb: int, tw: int) -> str:
    """The canonical name of a decode point."""
    return f"KB{kb}/TW{tw}"


@dataclass(frozen=True)
class Constraint:
    """A rule every valid point satisfies; ``reason`` is the message when it does not."""

    check: Callable[[int, int], bool]
    reason: str


def _axes(backend: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if backend == "host":
        return HOST_KB, HOST_TW
    if backend in GPU_BACKENDS:
        return GPU_KB, GPU_TW
    raise InvalidVariant(f"decode family has no space for backend {backend!r} (known: cuda, host, rocm)")


def constraints(backend: str) -> list[Constraint]:
    """Declared constraints of the decode space for one backend."""
    kbs, tws = _axes(backend)
    kb_list, tw_list = ",".join(map(str, kbs)), ",".join(map(str, tws))
    if backend == "host":
        why = "host kernels are generated for these only"
    else:
        why = "the kernel template is instantiated for these only"
    return [
        Constraint(lambda kb, tw: kb in kbs, f"kb must be one of {kb_list} ({why})"),
        Constraint(lambda kb, tw: tw in tws, f"tw must be one of {tw_list} ({why})"),
    ]


class DecodeFamily:
    """Decode GEMV family; stateless, safe to share."""

    name: str = "decode"
    phase: str = "decode"

    def space(self, backend: str) -> list[Variant]:
        """All valid points, simplest first (smaller kb, then smaller tw)."""
        kbs, tws = _axes(backend)
        names = [(kb, tw) for kb in kbs for tw in tws]
        return [
            Variant(self.name, variant_name(kb, tw), {"kb": kb, "tw": tw}, order=i)
            for i, (kb, tw) in enumerate(names)
        ]

    def parse(self, name: str, backend: str) -> Variant:
        """Parse ``KB{kb}/TW{tw}``; InvalidVariant says which rule failed."""
        match = _NAME_RE.match(name)
        if match is None:
            raise InvalidVariant(
                f"{name!r} is not a decode variant name; expected KB{{kb}}/TW{{tw}}, e.g. KB8/TW8"
            )
        kb, tw = int(match.group(1)), int(match.group(2))
        return resolve_variant(
            name,
            variant_name(kb, tw),
            lambda: [c.reason for c in constraints(backend) if not c.check(kb, tw)],
            self.space,
            backend,
        )
