"""Where a variant can run: a package's point restrictions as a plain function of (variant, codebook,
M, N, K), for the fallbacks that answer from a model (service.tables.neighbours, .surrogate): they
never answer a variant the package rules out at the query, which the measured times cannot tell
them at a shape nobody measured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from service.tables.model import CODEBOOK_FORMATS

if TYPE_CHECKING:
    from kernels.packages.package import KernelPackage, Variant

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
        self._parsed: dict[str, Variant | None] = {}  # None: a name the package does not parse

    def __getstate__(self) -> dict[str, object]:
        """Without the memo (a wrapper of a bound method does not pickle): worker processes get their own."""
        return {key: value for key, value in self.__dict__.items() if key != "_check"}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._check = lru_cache(maxsize=1 << 20)(self._valid)

    def _valid(self, variant: str, codebook: int, m: int, n: int, k: int) -> bool:
        from kernels.formats.registry import FORMATS

        if variant not in self._parsed:
            try:
                self._parsed[variant] = self.package.parse(variant, self.backend)
            except ValueError:
                self._parsed[variant] = None
        parsed = self._parsed[variant]
        if parsed is None:
            return True
        formats = [f for f in CODEBOOK_FORMATS.get(codebook, ()) if f in self.package.manifest.formats]
        return all(self.package.point_holds(parsed, n, k, m, FORMATS[f], self.facts) for f in formats)

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


def grid_validity(
    valid: Validity, codebook: int, m: int, variants: Sequence[str], ns: Sequence[int], ks: Sequence[int]
) -> np.ndarray:
    """len(ns) x len(ks) x variants: a variant is a candidate at a grid point only if it is valid there
    and at the point's 8 grid neighbours. A tree leaf holding a grid point answers every (N, K) up to
    the cuts halfway to its neighbours, and a restriction (the K slice fitting shared memory) may flip
    in between; a variant valid at both ends of a step is taken as valid across it."""
    at = np.array(
        [[[valid(v, codebook, m, n, k) for v in variants] for k in ks] for n in ns], dtype=bool
    ).reshape(len(ns), len(ks), len(variants))
    padded = np.pad(at, ((1, 1), (1, 1), (0, 0)), mode="edge")
    ok = np.ones_like(at)
    for dn in range(3):
        for dk in range(3):
            ok &= padded[dn : dn + len(ns), dk : dk + len(ks)]
    return ok
