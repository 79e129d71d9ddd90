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
    return _package_validity(chosen, arch)


@lru_cache(maxsize=32)
def _package_validity(package: KernelPackage, arch: str) -> PackageValidity:
    """One PackageValidity per (package, arch): its verdicts, and the domain grid's columns memoised
    on it (domain_of), serve every table generated for them, not only the first."""
    return PackageValidity(package, arch)


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


DOMAIN_MIN = K_QUANTUM  # the smallest N and K a table is held to
DOMAIN_STEP_N = 0.25  # octaves between the domain grid's N values (the package rules seldom read N)
DOMAIN_STEP_K = 0.125  # octaves between its K values (a ring's shared memory grows with K)

# A cell of the domain grid: (codebook, M key, N, K)
DomainPoint = tuple[int, int, int, int]


def domain_ns() -> list[int]:
    """N of the domain grid: DOMAIN_STEP_N octaves apart from DOMAIN_MIN to DOMAIN_MAX_K."""
    steps = round(math.log2(DOMAIN_MAX_K / DOMAIN_MIN) / DOMAIN_STEP_N)
    return sorted({round(DOMAIN_MIN * 2 ** (i * DOMAIN_STEP_N)) for i in range(steps + 1)})


def domain_grid_ks() -> list[int]:
    """K of the domain grid: DOMAIN_STEP_K octaves apart from DOMAIN_MIN to DOMAIN_MAX_K, on whole
    super-blocks (whole_blocks)."""
    steps = round(math.log2(DOMAIN_MAX_K / DOMAIN_MIN) / DOMAIN_STEP_K)
    return whole_blocks([round(DOMAIN_MIN * 2 ** (i * DOMAIN_STEP_K)) for i in range(steps + 1)])


def _with_neighbours(at: np.ndarray) -> np.ndarray:
    """N x K bool: true where ``at`` holds at the cell and its 8 grid neighbours (grid_validity's rule)."""
    padded = np.pad(at, 1, mode="edge")
    ok = np.ones_like(at)
    for dn in range(3):
        for dk in range(3):
            ok &= padded[dn : dn + at.shape[0], dk : dk + at.shape[1]]
    return ok


class DomainValidity:
    """A Validity on the domain grid (domain_ns x domain_grid_ks), per (codebook, M key, variant): ``at``
    the package's verdict at each cell, ``safe`` that verdict at the cell and its 8 grid neighbours (what
    the fallbacks fit to: a leaf holding a cell answers up to the cuts halfway to its neighbours).
    Validity that does not read N (PackageValidity.reads_n false) is evaluated once per K and broadcast
    over N. Columns are memoised: every fold of a policy's cross-validation asks for the same ones."""

    def __init__(self, valid: Validity) -> None:
        self.valid = valid
        self.ns = np.array(domain_ns(), dtype=np.int64)
        self.ks = np.array(domain_grid_ks(), dtype=np.int64)
        self.reads_n = bool(getattr(valid, "reads_n", True))
        self._columns: dict[tuple[int, int, str], tuple[np.ndarray, np.ndarray]] = {}
        self._quantum: dict[tuple[int, int, str, int], np.ndarray] = {}

    def _column(self, codebook: int, m: int, variant: str) -> tuple[np.ndarray, np.ndarray]:
        key = (codebook, m, variant)
        if key not in self._columns:
            ns = self.ns.tolist() if self.reads_n else [int(self.ns[0])]
            at = np.array(
                [[self.valid(variant, codebook, m, n, k) for k in self.ks.tolist()] for n in ns], dtype=bool
            )
            at = np.broadcast_to(at, (len(self.ns), len(self.ks)))
            self._columns[key] = (at, _with_neighbours(np.ascontiguousarray(at)))
        return self._columns[key]

    def at(self, codebook: int, m: int, variants: Sequence[str]) -> np.ndarray:
        """N x K x variants: valid at the cell."""
        return np.stack([self._column(codebook, m, v)[0] for v in variants], axis=-1)

    def safe(self, codebook: int, m: int, variants: Sequence[str]) -> np.ndarray:
        """N x K x variants: valid at the cell and its 8 grid neighbours."""
        return np.stack([self._column(codebook, m, v)[1] for v in variants], axis=-1)

    def cells(self, m: int, ks: np.ndarray | None = None) -> np.ndarray:
        """N * K x (M, N, K) of the grid at one M key, N-major (the order of at / safe reshaped); ``ks``:
        other K than the grid's (quantum_safe's)."""
        n, k = np.meshgrid(self.ns, self.ks if ks is None else ks, indexing="ij")
        return np.column_stack([np.full(n.size, m), n.ravel(), k.ravel()]).astype(np.int64)

    def quantum_safe(
        self, codebook: int, m: int, variants: Sequence[str], top: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(ks, N x ks x variants) over every multiple of K_QUANTUM up to ``top``: valid at the cell and
        at its N grid neighbours, not at its K neighbours. Every whole-block K is a cell here, so a leaf
        answers no K between cells; and a leaf cut on K's divisibility (service.tables.tree.KModFeature)
        holds no K neighbour: KB4 of the RG16 ring runs at K % 1024 == 0 only, and the 8-neighbour rule
        (safe) never let a tree answer it."""
        ks = np.arange(K_QUANTUM, min(top, DOMAIN_MAX_K) + 1, K_QUANTUM, dtype=np.int64)
        out = []
        for variant in variants:
            key = (codebook, m, variant, int(ks[-1]))
            if key not in self._quantum:
                ns = self.ns.tolist() if self.reads_n else [int(self.ns[0])]
                at = np.array(
                    [[self.valid(variant, codebook, m, n, k) for k in ks.tolist()] for n in ns], dtype=bool
                )
                if self.reads_n:
                    padded = np.pad(at, ((1, 1), (0, 0)), mode="edge")
                    at = padded[:-2] & padded[1:-1] & padded[2:]
                self._quantum[key] = np.broadcast_to(at, (len(self.ns), len(ks)))
            out.append(self._quantum[key])
        return ks, np.stack(out, axis=-1)


@lru_cache(maxsize=16)
def domain_of(valid: Validity) -> DomainValidity | None:
    """The memoised DomainValidity of ``valid`` (None when every variant is valid everywhere)."""
    return None if valid is always_valid else DomainValidity(valid)


def domain_violations(
    answer: Callable[[int, int, int, int], str | None],
    valid: Validity,
    keys: Sequence[tuple[int, int]],
    limit: int | None = None,
) -> list[tuple[DomainPoint, str]]:
    """Cells of the domain grid, at each (codebook, M key) of ``keys``, where ``answer`` (the table's
    lookup) names a variant ``valid`` rules out there (the first ``limit``; None: all). No answer is
    never a violation: the engine's own default runs."""
    bad: list[tuple[DomainPoint, str]] = []
    if valid is always_valid:
        return bad
    ns, ks = domain_ns(), domain_grid_ks()
    for codebook, m in keys:
        for n in ns:
            for k in ks:
                variant = answer(codebook, m, n, k)
                if variant is not None and not valid(variant, codebook, m, n, k):
                    bad.append(((codebook, m, n, k), variant))
                    if limit is not None and len(bad) >= limit:
                        return bad
    return bad
