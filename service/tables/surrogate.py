"""The third fallback policy: a per-variant time model labels a dense synthetic grid, a tree learns it.

Why: on real H200 sweeps a tree or segments fitted on the measured shapes alone cannot answer a
shape between grid neighbours whose best split-K depth differs by a step (each step costs 15-40%),
and the LM head lies 10x beyond every other N. A model of every variant's time interpolates
between shapes instead of copying a neighbour's winner.

Model (fitted per M key, pooled over codebooks): at a query (n, k) a Gaussian-weighted local
linear regression in (log2 n, log2 k) (bandwidth BANDWIDTH octaves, the query clamped into the
training range so nothing extrapolates linearly) of log time on, per variant, an intercept and two
slopes, plus a ridge-shrunk per-(codebook, variant) offset, plus shared coefficients on the
variant's launch-geometry covariates where the variant space has a known geometry (see
``kbtw_geometry``: wave quantisation of the grid and of rows per wave). The argmin of the predicted
times is the model's answer.

Table: the model labels a grid of (M, N, K) (log2 N and log2 K every GRID_STEP octave over the
training range and beyond it) with each variant's predicted time, a mean over the cell's N; a regret
tree (service.tables.tree.fit_tree, grown through zero-gain cuts, then pruned where a subtree does
not lower the predicted regret by MIN_GAIN) compresses it into nested integer comparisons over M, N,
K, so every dialect renders it as its decision tree: the lookup stays integer-exact. Pure numpy.

Limit: the tree splits on M, N, K only, so it cannot follow the wave quantisation (it flips every
few percent of N); held out on the H200 sweep the emitted tree loses about 3x the model's own regret.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from service.tables.model import MeasuredPoint
from service.tables.tree import FallbackTree, fit_tree

BANDWIDTH = 1.2  # octaves of N and K: chosen by leave-one-shape-out on the H200 sweep (1.0-1.5 within 0.1%)
SLOPE_RIDGE = 0.01  # shrinks the per-variant slopes where few neighbours carry weight
CODEBOOK_RIDGE = 1.0  # shrinks a codebook's per-variant offset toward the pooled fit
MIN_WEIGHT = 1e-4  # training shapes weighted below this (relative) are left out of a local fit
GRID_STEP = 0.25  # octaves between synthetic grid values of N and K
CELL_SAMPLES = 8  # N values a grid label averages over (one grid step wide)
GRID_BEYOND_N = 4.0  # octaves of N above the largest measured (LM heads lie far beyond the layers)
TREE_DEPTH = 14
MIN_GAIN = 0.001  # a tree split must lower its node's mean predicted regret by this much

# (variant, n, k) -> covariates; None: no geometry known, the model interpolates times alone.
Geometry = Callable[[str, int, int], tuple[float, ...]]


def kbtw_geometry(cus: int, wave: int, resident_blocks: int = 3) -> Geometry:
    """Wave-quantisation covariates of Llaminar's KB/TW decode launch (the tb-decode KB/TW package's
    [derived] expressions): rows per wave ``max(1, ceil(n / max(1, tw*cus // kb)))``, groups
    ``ceil(n / (rows_per_wave * 256/wave))``, grid = groups x kb blocks run in rounds of
    ``cus * resident_blocks`` (3: the TW = 24 launch bound that wins almost everywhere). The two
    covariates are log(quantised / continuous) of the rounds and of rows per wave: how much work
    the integer geometry adds over the smooth trend the interpolation sees."""
    rows_per_block = max(1, 256 // wave)

    def covariates(variant: str, n: int, k: int) -> tuple[float, ...]:
        kb, tw = (int(part[2:]) for part in variant.split("/"))
        per = max(1, tw * cus // kb)
        rpw = max(1, -(-n // per))
        groups = -(-n // (rpw * rows_per_block))
        rounds = -(-(groups * kb) // (cus * resident_blocks))
        rpw_c = max(1.0, n / per)
        rounds_c = max(1.0, n * kb / (rpw_c * rows_per_block) / (cus * resident_blocks))
        return (math.log(rounds / rounds_c), math.log(rpw / rpw_c))

    return covariates


def geometry_for(variants: Sequence[str], arch: str | None) -> Geometry | None:
    """The KB/TW geometry when every variant is a KB/TW name and the arch is a known GPU; else None."""
    from service.tables.codecs import DecodeCodec

    if arch is None or not variants:
        return None
    try:
        for v in variants:
            DecodeCodec().parse_variant(v)
        from kernels.arches import get_arch

        spec = get_arch(arch)
    except (ValueError, KeyError):
        return None
    return kbtw_geometry(spec.cus, spec.wave) if spec.backend != "host" and spec.wave > 1 else None


class TimeModel:
    """Training data of one M key, laid out once; each query solves one weighted ridge regression."""

    def __init__(
        self,
        points: Sequence[MeasuredPoint],
        variants: Sequence[str],
        codebooks: Sequence[int],
        geometry: Geometry | None,
    ) -> None:
        self.variants = tuple(variants)
        self.codebooks = tuple(codebooks)
        self.geometry = geometry
        index = {v: j for j, v in enumerate(self.variants)}
        cbi = {cb: i for i, cb in enumerate(self.codebooks)}
        self.log_n = np.log2([p.n for p in points])
        self.log_k = np.log2([p.k for p in points])
        pairs = [
            (i, index[v], cbi[p.codebook], v, t)
            for i, p in enumerate(points)
            for v, t in (p.times_us or {}).items()
        ]
        nv, nc = len(self.variants), len(self.codebooks)
        self.ng = len(geometry(self.variants[0], points[0].n, points[0].k)) if geometry else 0
        self.width = 3 * nv + nc * nv + self.ng
        self.point = np.array([i for i, *_ in pairs])
        self.var = np.array([j for _, j, *_ in pairs])
        self.design = np.zeros((len(pairs), self.width))
        rows = np.arange(len(pairs))
        self.design[rows, 3 * self.var] = 1.0
        self.design[rows, 3 * nv + np.array([c for _, _, c, _, _ in pairs]) * nv + self.var] = 1.0
        if geometry:
            self.design[:, 3 * nv + nc * nv :] = [
                geometry(v, points[i].n, points[i].k) for i, _, _, v, _ in pairs
            ]
        self.log_t = np.log([t for *_, t in pairs])
        self.ridge = np.full(self.width, 1e-6)  # every column, so an all-zero one (a flat covariate) solves
        self.ridge[1 : 3 * nv : 3] = self.ridge[2 : 3 * nv : 3] = SLOPE_RIDGE
        self.ridge[3 * nv : 3 * nv + nc * nv] = CODEBOOK_RIDGE
        self._cache: dict[tuple[float, float], np.ndarray] = {}
        self._geo_cache: dict[tuple[int, int], np.ndarray] = {}

    def predict(self, n: int, k: int, spread: float = 0.0) -> dict[int, dict[str, float]]:
        """Predicted time (us) of every variant per codebook at (n, k).

        ``spread`` > 0 (grid labels): each variant's mean predicted time over CELL_SAMPLES values of N
        spanning ``spread`` octaves around n. The geometry's wave quantisation flips every few percent
        of N, far finer than any grid, so a label stands for its whole cell. (The minimax label, the
        worst regret over the cell, did worse held out on the H200 sweep: 27% vs 10-60% at the
        K = 16384 shapes, where the best variant's one-round grid is exactly what the cell blurs.)"""
        qn = min(max(math.log2(n), float(self.log_n.min())), float(self.log_n.max()))
        qk = min(max(math.log2(k), float(self.log_k.min())), float(self.log_k.max()))
        beta = self._cache.get((qn, qk))
        if beta is None:
            beta = self._cache[(qn, qk)] = self._solve(qn, qk)
        nv, nc = len(self.variants), len(self.codebooks)
        base = beta[0 : 3 * nv : 3]
        if self.geometry is None:
            samples = np.zeros((1, nv))
        else:
            coef = beta[3 * nv + nc * nv :]
            ns = [n]
            if spread > 0:
                steps = range(CELL_SAMPLES)
                ns = sorted(
                    {max(1, round(n * 2 ** (spread * (j / (CELL_SAMPLES - 1) - 0.5)))) for j in steps}
                )
            samples = np.array([self._covariates(m, k) @ coef for m in ns])
        out: dict[int, dict[str, float]] = {}
        for c, cb in enumerate(self.codebooks):
            log_t = base + beta[3 * nv + c * nv : 3 * nv + (c + 1) * nv] + samples  # samples x variants
            values = np.exp(log_t).mean(axis=0)
            out[cb] = dict(zip(self.variants, values.tolist(), strict=True))
        return out

    def _covariates(self, n: int, k: int) -> np.ndarray:
        """variants x covariates at (n, k), memoised (grid cells share their N samples)."""
        found = self._geo_cache.get((n, k))
        if found is None:
            assert self.geometry is not None
            found = self._geo_cache[(n, k)] = np.array([self.geometry(v, n, k) for v in self.variants])
        return found

    def _solve(self, qn: float, qk: float) -> np.ndarray:
        """The local fit at (log2 n, log2 k) = (qn, qk), inside the training range."""
        dn, dk = self.log_n - qn, self.log_k - qk
        d2 = dn * dn + dk * dk
        weight = np.exp(-(d2 - d2.min()) / (2 * BANDWIDTH * BANDWIDTH))  # nearest shape 1: never all zero
        keep = weight[self.point] >= MIN_WEIGHT
        a = self.design[keep].copy()
        rows = np.arange(len(a))
        pt, var = self.point[keep], self.var[keep]
        a[rows, 3 * var + 1] = dn[pt]
        a[rows, 3 * var + 2] = dk[pt]
        aw = a * weight[pt][:, None]
        return np.asarray(np.linalg.solve(aw.T @ a + np.diag(self.ridge), aw.T @ self.log_t[keep]))


def complete_variants(points: Sequence[MeasuredPoint]) -> dict[int, tuple[str, ...]]:
    """Per codebook, the variants parity-passing (timed) at every one of its points: the only ones the
    model may answer (a variant failing somewhere may fail at an unseen shape too). Falls back to every
    timed variant where no variant is complete."""
    out: dict[int, tuple[str, ...]] = {}
    for cb in sorted({p.codebook for p in points}):
        sets = [set(p.times_us or {}) for p in points if p.codebook == cb]
        common = set.intersection(*sets) if sets else set()
        out[cb] = tuple(sorted(common or set.union(*sets)))
    return out


def fit_models(points: Sequence[MeasuredPoint], geometry: Geometry | None) -> dict[int, TimeModel]:
    """One TimeModel per M key, pooled over codebooks."""
    models: dict[int, TimeModel] = {}
    for m in sorted({p.m for p in points}):
        group = tuple(p for p in points if p.m == m and p.times_us)
        if not group:
            continue
        variants = tuple(sorted({v for p in group for v in p.times_us or {}}))
        models[m] = TimeModel(group, variants, tuple(sorted({p.codebook for p in group})), geometry)
    return models


def model_answer(
    models: dict[int, TimeModel], allowed: dict[int, tuple[str, ...]]
) -> Callable[[MeasuredPoint], str | None]:
    """The model's own argmin (no grid, no tree): what the inner held-out score judges."""

    def answer(p: MeasuredPoint) -> str | None:
        model = models.get(p.m)
        if model is None or p.codebook not in allowed or p.n <= 0 or p.k <= 0:
            return None
        times = model.predict(p.n, p.k).get(p.codebook)
        if not times:
            return None
        candidates = [v for v in allowed[p.codebook] if v in times]
        return min(candidates, key=lambda v: (times[v], v)) if candidates else None

    return answer


def grid_values(values: Sequence[int], below: float, above: float) -> list[int]:
    """Log-spaced values GRID_STEP octaves apart over the training range widened by ``below`` and
    ``above`` octaves (beyond the range the model is clamped, only the geometry changes)."""
    lo, hi = math.log2(min(values)) - below, math.log2(max(values)) + above
    steps = math.floor((hi - lo) / GRID_STEP)
    grid = {round(2 ** (lo + i * GRID_STEP)) for i in range(steps + 1)}
    return sorted(grid)


def fit_surrogate_trees(
    points: Sequence[MeasuredPoint], geometry: Geometry | None
) -> dict[int, FallbackTree]:
    """Per codebook, the regret tree fitted on the model-labelled synthetic grid."""
    models = fit_models(points, geometry)
    allowed = complete_variants(points)
    ns = grid_values([p.n for p in points], 1.0, GRID_BEYOND_N)
    ks = grid_values([p.k for p in points], 1.0, 1.0)
    synthetic: dict[int, list[MeasuredPoint]] = {cb: [] for cb in allowed}
    for m, model in models.items():
        for n in ns:
            for k in ks:
                for cb, times in model.predict(n, k, GRID_STEP).items():
                    kept = {v: times[v] for v in allowed.get(cb, ()) if v in times}
                    if kept:
                        winner = min(kept, key=lambda v: (kept[v], v))
                        synthetic[cb].append(MeasuredPoint(cb, m, n, k, "grid", winner, kept))
    trees: dict[int, FallbackTree] = {}
    for cb, grid in synthetic.items():
        if not grid:
            continue
        ms = tuple(sorted({p.m for p in grid}))
        root = fit_tree(grid, TREE_DEPTH, 1, min_gain=MIN_GAIN, grow_through=True)
        trees[cb] = FallbackTree(cb, ms, root, TREE_DEPTH, 1)
    return trees
