"""Where a variant can run: a package's point restrictions as a plain function of (variant, codebook,
M, N, K), for the fallbacks that answer from a model (service.tables.neighbours, .surrogate): they
never answer a variant the package rules out at the query, which the measured times cannot tell
them at a shape nobody measured.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from service.tables.model import CODEBOOK_FORMATS

if TYPE_CHECKING:
    from kernels.families.base import Variant
    from kernels.packages.package import KernelPackage

K_QUANTUM = 256  # every GGUF block size divides it
DOMAIN_MAX_K = 1 << 16  # above every LLM's hidden and FFN width (Llama 3.1 405B's FFN: 53248)

# (variant, codebook, M, N, K) -> can this variant run there (the package's restrictions)
Validity = Callable[[str, int, int, int, int], bool]


def always_valid(variant: str, codebook: int, m: int, n: int, k: int) -> bool:
    return True


class PackageValidity:
    """A package's point restrictions as a Validity: a variant is valid for a codebook key when it is
    valid for every format of the codebook the package reads (the table answers all of them). Names
    the package does not parse are valid (the measured times decide). When no point rule reads N
    (through derived values too), answers are cached per (variant, codebook, M, K)."""

    def __init__(self, package: KernelPackage, arch: str) -> None:
        from kernels.arches import get_arch
        from kernels.packages.expressions import parse
        from kernels.packages.package import DeviceFacts

        spec = get_arch(arch)
        self.package = package
        self.backend = spec.backend
        self.facts = DeviceFacts(spec.backend, arch, spec.cus, spec.wave)
        derived = {name: parse(src).names for name, src in package.manifest.derived.items()}

        def reads(names: frozenset[str], seen: frozenset[str] = frozenset()) -> set[str]:
            out = set(names)
            for name in names & derived.keys() - seen:
                out |= reads(derived[name], seen | {name})
            return out

        used: set[str] = set()
        for rule in package.manifest.restrictions.rules:
            used |= reads(parse(rule).names)
        self.reads_n = "n" in used
        self._check = lru_cache(maxsize=1 << 20)(self._valid)
        self._parse = lru_cache(maxsize=1 << 12)(self._parsed)  # a third of a check's time (grid_validity)

    def _parsed(self, variant: str) -> Variant | None:
        try:
            return self.package.parse(variant, self.backend)
        except ValueError:
            return None

    def _valid(self, variant: str, codebook: int, m: int, n: int, k: int) -> bool:
        from kernels.formats.registry import FORMATS

        parsed = self._parse(variant)
        if parsed is None:
            return True
        formats = [f for f in CODEBOOK_FORMATS.get(codebook, ()) if f in self.package.manifest.formats]
        for fmt in formats:
            values = self.package.bindings(parsed, n, k, m, FORMATS[fmt], self.facts)
            if self.package.point_problems(values):
                return False
        return True

    def __call__(self, variant: str, codebook: int, m: int, n: int, k: int) -> bool:
        return bool(self._check(variant, codebook, m, n if self.reads_n else 1, k))


def validity_for(variants: Sequence[str], arch: str | None, package: KernelPackage | None = None) -> Validity:
    """``package``'s restrictions (default: the built-in decode package's) when every variant is one of
    its names on the arch's backend; else always valid (e.g. an older space's names: the measured
    times alone decide)."""
    if arch is None or not variants:
        return always_valid
    from kernels.arches import get_arch
    from kernels.packages.loader import BUILTIN_FOR_PHASE, builtin_packages

    try:
        backend = get_arch(arch).backend
        chosen = package or builtin_packages()[BUILTIN_FOR_PHASE["decode"]]
        for v in variants:
            chosen.parse(v, backend)
    except (ValueError, KeyError):
        return always_valid
    return PackageValidity(chosen, arch)


def whole_blocks(ks: Sequence[int]) -> list[int]:
    """Grid K values on whole super-blocks (every GGUF block size divides 256), as a real K is: a
    restriction such as ``k % block_weights == 0`` must not rule a variant out at a grid K no model has."""
    return sorted({max(K_QUANTUM, round(k / K_QUANTUM) * K_QUANTUM) for k in ks})


def domain_ks(ks: Sequence[int]) -> list[int]:
    """whole_blocks of a K grid extended one point per octave up to DOMAIN_MAX_K. A tree's last leaf
    answers every K above the grid, and a restriction on the K slice (the shared memory a ring holds)
    flips above a short training range: without labels there, the table answered a variant the package
    rules out at a held-out K (a ring needing more shared memory than the SM has)."""
    top = max(ks)
    beyond = [top << i for i in range(1, 32) if top << i <= DOMAIN_MAX_K]
    if beyond and beyond[-1] < DOMAIN_MAX_K:
        beyond.append(DOMAIN_MAX_K)
    return whole_blocks([*ks, *beyond])


def quantum_ks(ks: Sequence[int], lo: int, hi: int) -> list[int]:
    """``ks`` with every multiple of K_QUANTUM in [lo, hi] added. A restriction on K's divisibility (a
    K slice of whole ring stages: K % 1024 for RG16 KB4, % 1280 for KB5) holds at some multiples of
    256 and not at the next: a tree (cuts halfway between grid values) can answer such a variant
    only at a K whose leaf holds no other multiple of 256, so the grid must hold each of them."""
    first = -(-max(lo, K_QUANTUM) // K_QUANTUM)
    return sorted({*ks, *range(first * K_QUANTUM, hi + 1, K_QUANTUM)})


def k_moduli(
    valid: Validity, codebook: int, ms: Sequence[int], variants: Sequence[str], n: int, top: int
) -> list[int]:
    """The moduli q > K_QUANTUM such that some variant (at some M) runs at two or more multiples of
    K_QUANTUM up to ``top`` and not at all of them, and every K it runs at is a multiple of q (the gcd
    of those K): the divisibility a tree may split on (service.tables.tree.KModFeature). RG16 KB4
    gives 1024, KB5 1280."""
    ks = range(K_QUANTUM, top + 1, K_QUANTUM)
    out = set()
    for m in ms:
        for v in variants:
            runs = [k for k in ks if valid(v, codebook, m, n, k)]
            if 2 <= len(runs) < len(ks):
                q = math.gcd(*runs)
                if q > K_QUANTUM:
                    out.add(q)
    return sorted(out)


def k_regions(ks: Sequence[int]) -> list[list[int]]:
    """Per sorted grid K, every K a tree leaf holding it answers that a real K can be: the multiples of
    K_QUANTUM between the cuts to its neighbours (service.tables.tree.split_threshold: isqrt of the
    product), the grid K itself included; the first reaches down to K_QUANTUM, the last stops at itself."""
    cuts = [0, *(math.isqrt(a * b) for a, b in itertools.pairwise(ks)), ks[-1]]
    return [
        sorted({k, *range((lo // K_QUANTUM + 1) * K_QUANTUM, hi + 1, K_QUANTUM)})
        for k, lo, hi in zip(ks, cuts[:-1], cuts[1:], strict=True)
    ]


def grid_validity(
    valid: Validity, codebook: int, m: int, variants: Sequence[str], ns: Sequence[int], ks: Sequence[int]
) -> np.ndarray:
    """len(ns) x len(ks) x variants: a variant is a candidate at a grid point only if it is valid at
    every K the tree leaf holding the point answers (k_regions: every multiple of K_QUANTUM up to the
    cuts halfway to the neighbouring grid K) and at the point's N neighbours. A restriction may flip
    between grid values (the K slice fitting shared memory) or hold at one multiple of 256 and not at
    the next (whole ring stages per K slice). Requiring the point's 8 grid neighbours instead kept a
    variant valid at every fourth multiple of 256 (RG16 KB4: K % 1024) out of every leaf: on the dense
    H200 recording the neighbours' tree lost 9.5% mean at held-out shapes where its model lost 1.8%.

    When ``valid`` does not read N (PackageValidity.reads_n) it is evaluated once per K, at every
    multiple in each region. When it does, at every grid N but only at each region's grid K and its
    first and last multiple of K_QUANTUM (a threshold in K is caught, a divisibility inside a region
    of several multiples is not; where the grid holds every multiple, quantum_ks, regions are single
    K): every multiple at every grid N took minutes for the prefill package."""
    ks = list(ks)
    regions = k_regions(ks)
    reads_n = getattr(valid, "reads_n", True)
    if reads_n:
        regions = [sorted({k, region[0], region[-1]}) for k, region in zip(ks, regions, strict=True)]
    every_k = sorted({k for region in regions for k in region})
    index = {k: i for i, k in enumerate(every_k)}
    probe_ns = list(ns) if reads_n else [ns[0]]
    at = np.array(
        [[[valid(v, codebook, m, n, k) for v in variants] for k in every_k] for n in probe_ns], dtype=bool
    ).reshape(len(probe_ns), len(every_k), len(variants))
    region_ok = np.stack([at[:, [index[k] for k in region]].all(axis=1) for region in regions], axis=1)
    if len(probe_ns) == 1:
        return np.broadcast_to(region_ok, (len(ns), len(ks), len(variants))).copy()
    padded = np.pad(region_ok, ((1, 1), (0, 0), (0, 0)), mode="edge")
    return padded[:-2] & padded[1:-1] & padded[2:]
