"""The one kernel weight layout every format is packed into (struct of arrays).

Every kernel source (host C, HIP/CUDA decode and prefill) reads the same arrays,
so one source serves all formats; only two compile-time switches differ per
*format kind*: ``TB_ASYMMETRIC`` (a min term is present) and ``TB_GROUP``
(weights per scale: 32 everywhere except Q6_K, whose sub-block scales cover 16
weights and cannot be merged into one 32-weight scale without losing exactness).

    qs:     int8    [N][K]        values already de-offset (Q4_0: q - 8, IQ4: table value)
    scales: float16 [N][K/group]  per-group scale
    mins:   float16 [N][K/group]  per-group additive term (asymmetric kinds only)

    weight[n][k] = scales[n][k/group] * qs[n][k] (+ mins[n][k/group])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FormatKind:
    """What the kernels are specialised on: presence of a min term and scale granularity."""

    name: str
    asymmetric: bool
    group: int

    @property
    def defines(self) -> dict[str, str]:
        """Preprocessor defines that select this kind in every kernel source."""
        return {"TB_ASYMMETRIC": str(int(self.asymmetric)), "TB_GROUP": str(self.group)}


SYM = FormatKind("sym", asymmetric=False, group=32)
ASYM = FormatKind("asym", asymmetric=True, group=32)
SYM16 = FormatKind("sym16", asymmetric=False, group=16)
KINDS: dict[str, FormatKind] = {k.name: k for k in (SYM, ASYM, SYM16)}


@dataclass
class PackedWeights:
    """Kernel-layout weights of one (N, K) matrix; arrays are C-contiguous."""

    qs: np.ndarray  # int8 [N][K]
    scales: np.ndarray  # float16 [N][K/group]
    mins: np.ndarray | None  # float16 [N][K/group] or None
    group: int = 32

    @property
    def n(self) -> int:
        return int(self.qs.shape[0])

    @property
    def k(self) -> int:
        return int(self.qs.shape[1])

    @property
    def nbytes(self) -> int:
        return self.qs.nbytes + self.scales.nbytes + (0 if self.mins is None else self.mins.nbytes)

    def rows(self, sel: np.ndarray | slice) -> PackedWeights:
        """A row subset (copy), e.g. for chunked references."""
        mins = None if self.mins is None else np.array(self.mins[sel], order="C", copy=True)
        return PackedWeights(
            np.array(self.qs[sel], order="C", copy=True),
            np.array(self.scales[sel], order="C", copy=True),
            mins,
            self.group,
        )


def dequantize_packed(p: PackedWeights) -> np.ndarray:
    """float32 [N][K] from the kernel layout, computed the way the kernels do (fp32 scale*q + min)."""
    n, k = p.qs.shape
    q = p.qs.astype(np.float32).reshape(n, k // p.group, p.group)
    w = q * p.scales.astype(np.float32)[:, :, None]
    if p.mins is not None:
        w = w + p.mins.astype(np.float32)[:, :, None]
    return w.reshape(n, k)
